"""The bring-up ladder (``invoke certify``) and its cross-node NIXL rung (``invoke nixl.cross_node``): from a
configured cluster to a report that says what was proven, the cheapest checks first."""
