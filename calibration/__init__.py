"""The offline contention calibrator (`gpu-balancer calibrate`): how much a node's contention slows
its LLM replicas, from a cluster's history. Outside the webhook's and descheduler's import path."""
