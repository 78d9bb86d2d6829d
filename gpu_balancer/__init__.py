"""The `gpu-balancer` command line: thin subcommands over the packages."""
