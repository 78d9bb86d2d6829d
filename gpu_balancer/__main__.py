"""`python -m gpu_balancer`: the same as the `gpu-balancer` console script."""

import sys

from gpu_balancer.cli import main

sys.exit(main())
