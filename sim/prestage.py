"""Make-before-break in the simulated world: a descheduler pass's evictions wait while their images
are pulled onto the destinations the plan reserved, as `descheduler.prestage` does in a real run.
Mutates the world it is given; no other I/O.

A real run pre-stages every eviction of its pass at once, waits for all of them (or
`descheduler.prestageDeadlineSeconds`), then evicts; the CronJob runs no other pass meanwhile
(`concurrencyPolicy: Forbid`). Each image lands on its destination when its pull would finish there
(the pull the replacement would otherwise pay, `sim.llm.world.image_fetch_seconds`); one still
pulling at the deadline is not there (the pre-pull pod is deleted: assumption).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from descheduler.proposals import PlannedEviction
from sim.llm import startup
from sim.llm.world import image_fetch_seconds
from sim.node_state import image_name
from sim.world_state import World


@dataclass(frozen=True)
class Pull:
    node: str
    image: str
    bytes: int
    done_tick: int


@dataclass(frozen=True)
class StagedPass:
    """One pass's evictions, held until `due_tick`, and the pulls under way for them."""

    evictions: tuple[PlannedEviction, ...]
    due_tick: int
    pulls: tuple[Pull, ...]


def stage(world: World, evictions: tuple[PlannedEviction, ...], deadline_seconds: float) -> StagedPass | None:
    """The pass held for its pulls; None where nothing is to be pulled (or pre-staging is off):
    evict at once."""
    if deadline_seconds <= 0:
        return None
    tick_seconds, pulls, longest = world.scenario.tick_seconds, [], 0.0
    for eviction in evictions:
        pod = world.pods.get(f"{eviction.namespace}/{eviction.pod}")
        if pod is None or pod.service is None or not eviction.destination or not eviction.stage:
            continue
        service = world.services[pod.service]
        for image in eviction.stage:
            seconds = image_fetch_seconds(world, service, image, eviction.destination)
            longest = max(longest, min(seconds, deadline_seconds))
            if seconds <= deadline_seconds:
                pulls.append(Pull(eviction.destination, image_name(image), service.image_bytes,
                                  world.tick + math.ceil(seconds / tick_seconds)))
    if longest <= 0:
        return None
    return StagedPass(evictions, world.tick + math.ceil(longest / tick_seconds), tuple(pulls))


def land_pulls(world: World, staged: StagedPass) -> None:
    """The images whose pulls have finished by now appear on their nodes, as the kubelet lists
    them; with `conditions.coldStart` they are used now, for its image GC."""
    for pull in staged.pulls:
        if pull.done_tick == world.tick:
            node = world.nodes[pull.node]
            node.images.setdefault(pull.image, pull.bytes)
            if world.llm.cache.enabled:
                world.llm.cache.last_used[pull.node, pull.image] = world.now_seconds
                startup.collect_images(world.llm.cache, pull.node, node.images, node.pods)
