"""The node signals, one module each: the PromQL a signal needs, how it reads into the snapshot,
how it judges a node and what a pod steered away is told. Pure, no I/O.

A new signal is one module (a `NodeSignal`, `signals.base`) and one line in `registry.SIGNALS`: its
queries join every snapshot refresh (and the recording rules, which record them as they are),
its rows are read into the node's telemetry, its verdicts join the node's heat. Utilisation and
memory, read per unit and replaced by per-node records at scale, and the serving signal, joined to
pods through kube-state-metrics, keep their own paths (`scoring.ingest.queries`, `scoring.ingest.serving`).
"""
