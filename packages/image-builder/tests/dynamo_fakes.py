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

# dynamo.vllm's modules a worker imports, as ai-dynamo 1.3.0.post1 lays them out: ``__main__`` imports ``main``,
# ``main`` imports ``args`` and ``handlers``, and these import vLLM (its __init__ holds only a version lookup).
# ``parse_args(argv)`` as 1.3's args.py: Dynamo's group takes what it knows, vLLM's engine arguments the rest
# (argparse's error and exit status 2 for a flag neither knows).
ARGS = (
    "import argparse\n"
    "import vllm\n"
    "from dynamo.vllm.backend_args import DynamoVllmArgGroup\n\n"
    "ENGINE_OPTIONS = ('--model', '--served-model-name', '--kv-transfer-config', '--tensor-parallel-size')\n\n"
    "def parse_args(argv=None):\n"
    "    parser = argparse.ArgumentParser(allow_abbrev=False)\n"
    "    DynamoVllmArgGroup().add_arguments(parser)\n"
    "    args, unknown = parser.parse_known_args(argv)\n"
    "    engine = argparse.ArgumentParser(add_help=False, allow_abbrev=False)\n"
    "    for option in ENGINE_OPTIONS:\n"
    "        engine.add_argument(option)\n"
    "    engine.add_argument('--enable-prefix-caching', action='store_true')\n"
    "    engine.parse_args(unknown)\n"
    "    return args\n"
)
DYNAMO_VLLM = {
    "ok": {
        "dynamo/vllm/main.py": "from dynamo.vllm.args import parse_args\nfrom dynamo.vllm import handlers\n",
        "dynamo/vllm/handlers.py": "import vllm\n",
        "dynamo/vllm/args.py": ARGS,
    },
    # Dynamo 1.3 against a vLLM that lacks what its handlers import (ATOM's 0.22 snapshot under Dynamo's 0.23):
    # ``import dynamo.vllm`` still passes, the worker dies at import.
    "main-fails": {
        "dynamo/vllm/main.py": "from vllm.renderers.embed_utils import safe_load_prompt_embeds\n",
        "dynamo/vllm/handlers.py": "from vllm.renderers.embed_utils import safe_load_prompt_embeds\n",
        "dynamo/vllm/args.py": ARGS,
    },
    # The chain the H200 run met (evidence/h200-vllm-dynamo-stack): vLLM imports nixl_ep whenever it is
    # installed, and nixl_ep loads its extension for the running torch by name, which nixl 1.5.1 does not ship
    # for torch 2.11: nixl_ep/__init__.py imports nixl_ep_cu13.nixl_ep_cpp_torch<N>, a module that is not there.
    "nixl-ep-torch": {
        "dynamo/vllm/main.py": "from dynamo.vllm.args import parse_args\nimport nixl_ep\n",
        "dynamo/vllm/handlers.py": "import vllm\n",
        "dynamo/vllm/args.py": ARGS,
        "nixl_ep/__init__.py": "import importlib\nimportlib.import_module('nixl_ep_cu13.nixl_ep_cpp_torch211')\n",
        "nixl_ep_cu13/__init__.py": "",
    },
}
# Worker argv of the kind the launchers write, for the fakes' parser.
WORKER_ARGS = {
    "prefill": ["--model", "/models/m", "--served-model-name", "m", "--disaggregation-mode", "prefill",
                "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
                "--enable-prefix-caching"],
    "decode": ["--model", "/models/m", "--served-model-name", "m", "--disaggregation-mode", "decode",
               "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'],
}  # fmt: skip
