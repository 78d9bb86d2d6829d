"""`python -m descheduler ARGS` is `gpu-balancer deschedule ARGS` (for container entrypoints)."""

import sys

from gpu_balancer.cli import main

sys.exit(main(["deschedule", *sys.argv[1:]]))
