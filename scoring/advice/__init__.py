"""Placement advice: the ranking of nodes for a new GPU pod and each node's time to ready. Pure, no I/O."""
