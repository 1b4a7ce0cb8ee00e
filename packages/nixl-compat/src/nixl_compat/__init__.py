"""nixl-compat: backend resolution for the `rixl` module names, the NIXL doctor and the KV-transfer bench."""

__version__ = "0.1.0"
