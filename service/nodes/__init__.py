"""Nodes and their GPUs, as agents register and report them."""
