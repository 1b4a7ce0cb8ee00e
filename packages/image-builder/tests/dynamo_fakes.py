"""Stand-ins for Dynamo modules in the validator's constructed environments (Dynamo needs vLLM to run)."""

# Dynamo's own argument group for dynamo.vllm, as 1.3.0's backend_args.py declares the role flag; an older release
# had only --is-prefill-worker / --is-decode-worker.
BACKEND_ARGS = {
    "1.3": (
        "class DynamoVllmArgGroup:\n"
        "    def add_arguments(self, parser):\n"
        "        parser.add_argument('--disaggregation-mode', default=None,\n"
        "                            choices=['pd', 'agg', 'prefill', 'decode', 'encode'])\n"
    ),
    "older": (
        "class DynamoVllmArgGroup:\n"
        "    def add_arguments(self, parser):\n"
        "        parser.add_argument('--is-prefill-worker', action='store_true')\n"
        "        parser.add_argument('--is-decode-worker', action='store_true')\n"
    ),
}
