"""The cross-node NIXL probe: two processes on two nodes, in the workers' runtime and environment, moving
buffers shaped like the model's KV blocks before any model is loaded (``python -m nixl_compat.crossnode``)."""
