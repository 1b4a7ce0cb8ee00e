"""Cluster preparation: images and the dma-buf helper on every node, run-owned etcd, the per-node preflight."""
