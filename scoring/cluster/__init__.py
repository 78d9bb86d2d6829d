"""The cluster's objects as placement reads them: nodes, pods, claims, images, what fits where. Pure, no I/O."""
