"""`python -m webhook ARGS` is `gpu-balancer webhook ARGS` (for container entrypoints)."""

import sys

from gpu_balancer.cli import main

sys.exit(main(["webhook", *sys.argv[1:]]))
