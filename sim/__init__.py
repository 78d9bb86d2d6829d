"""Cluster simulation: synthetic GPU fleets and the fake dcgm-exporter that serves them."""
