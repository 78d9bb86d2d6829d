"""`python -m certs ARGS` is `gpu-balancer certs ARGS` (for container entrypoints)."""

import sys

from gpu_balancer.cli import main

sys.exit(main(["certs", *sys.argv[1:]]))
