"""The pure core of gpu-balancer: `ingest` (telemetry in, with its `signals`), `heat` (a node's tier),
`cluster` (the Kubernetes objects placement reads), `advice` (placement), and the vocabulary they share
(`policy`, `dcgm`, `tiers`, `plugins`, `errors`). No I/O except `scoring.ingest.prometheus`."""
