"""`python -m webhook ARGS` is `gpu-balancer webhook ARGS` (for container entrypoints). It replaces this
process with the command line's rather than importing it: a package does not depend on the CLI."""

import os
import sys

os.execv(sys.executable, [sys.executable, "-m", "gpu_balancer", "webhook", *sys.argv[1:]])
