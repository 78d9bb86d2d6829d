"""The pure core of gpu-balancer: telemetry model, heat model and policy (no I/O except `scoring.prometheus`)."""
