"""Placement: a pure function from a cluster snapshot to a plan, and the loop around it."""
