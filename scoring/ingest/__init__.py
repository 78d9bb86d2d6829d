"""Telemetry in: the PromQL asked, the rows Prometheus answers and the frozen snapshot built from them
(only `prometheus.py` does I/O)."""
