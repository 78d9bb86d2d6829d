"""Placement advice: which nodes a new GPU pod should prefer and which it should avoid. Pure, no I/O.

The advice is bounded (at most K preferred nodes, at most N avoided) whatever the fleet size, and
it accounts for load steered since the telemetry was taken (`pending_gpus`), so a burst of pods
inside one telemetry interval is spread in proportion to each node's free GPUs instead of all
being sent to the same coolest node. Nodes are ranked once per snapshot (`index_fleet`); `rank`
walks that ranking, and `webhook.ledger` keeps the same ranking incrementally so an admission
costs O(K log n) however many nodes have pending load.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from scoring.cluster.view import ClusterView
from scoring.heat import FleetHeat, NodeHeat, Tier
from scoring.ingest.signals import registry as signals
from scoring.ingest.signals.degraded import degraded_units
from scoring.policy import PlacementPolicy

_TIER_FACTOR = {Tier.COOL: 1.0, Tier.WARM: 0.5}
"""Warm nodes are preferred only after cool ones: half the headroom score."""


@dataclass(frozen=True, slots=True)
class NodePreference:
    node: str
    weight: int
    """1–100: the scheduler normalises preferred weights, so only their ratios matter."""


@dataclass(frozen=True, slots=True)
class NodeAvoidance:
    node: str
    reason: str
    """The node's tier, e.g. "hot" or "unhealthy", and what throttles its GPUs where something
    does ("hot, throttled: power cap")."""
    unhealthy: bool = False
    """A critical XID, a vanished GPU or a degraded one: excluded with a required term whenever
    the pod fits elsewhere, whatever the policy says of hot nodes."""


@dataclass(frozen=True, slots=True)
class NodeAdvice:
    preferred: tuple[NodePreference, ...]
    avoided: tuple[NodeAvoidance, ...]
    """Hot and unhealthy nodes: never preferred."""
    excluded: tuple[str, ...]
    """The avoided nodes named in a required NotIn. Preferred terms alone do not keep a pod off a
    node: the scheduler's spread and resource scores can outweigh them (issue 47, item 0b)."""
    reason: str
    """One line on why the advice is what it is (for the pod's annotation and the logs)."""
    domain: tuple[str, str] | None = None
    """For a distributed job: the (topology label, value) chosen for it."""
    domain_required: bool = False
    """The job's domain goes in a required term: a later worker, while the domain has room for it."""
    left_open: str = ""
    """Why an avoided node was not excluded, where one was not (said on the pod)."""
    ready: tuple[tuple[str, str], ...] = ()
    """(node, its estimated time to ready for this pod) for the preferred nodes, where estimated."""
    urgent: str = ""
    """Why the pod's service needs it serving soon (e.g. "svc queueing"): the advice then ranks by
    time to ready and adds no spread term. Empty in steady state."""

    @property
    def hard(self) -> bool:
        return bool(self.excluded)


NO_ADVICE = NodeAdvice((), (), (), "no telemetry")


def base_headroom(node: NodeHeat) -> float:
    """How attractive a node is before any pending load, 0–1; zero for hot, unhealthy or full nodes."""
    factor = _TIER_FACTOR.get(node.tier, 0.0)
    if factor == 0.0 or node.gpus_free <= 0:
        return 0.0
    idle_cycles = 1.0 - node.gpu_util / 100.0
    # Unknown memory ranks on cycles alone rather than as full; so does a node whose every GPU is
    # one pod's (its memory is no room for anyone: `scoring.ingest.memory`).
    memory_room = 1.0 - (node.memory_room_used or 0.0) / 2.0
    return factor * (0.25 + 0.75 * idle_cycles) * memory_room


def preference_weight(relative_headroom: float, rank: int) -> int:
    """The preferred term's weight, 1–100: the node's headroom relative to the best node's,
    halved at each rank below the first. The ledger books a pod against its top node, so the
    scheduler should follow the top unless its own scores (replica spread, resource fit) clearly
    disagree: with near-equal weights it picks among the K on other grounds, the booking is
    wrong, and the next pods of a burst pile onto the node it actually chose. The lower terms
    remain as fallbacks when the top node fills first."""
    return max(1, round(100 * relative_headroom / 2 ** rank))


def headroom(base: float, gpus_free: int, pending_gpus: int) -> float:
    """Base headroom times the share of free GPUs not yet promised to pods steered since the
    telemetry was taken: as a node is promised pods its score falls in proportion to its free
    GPUs, so a burst spreads over nodes in proportion to what each has free."""
    if pending_gpus >= gpus_free:
        return 0.0
    return base * (1.0 - pending_gpus / gpus_free)


@dataclass(frozen=True, slots=True)
class PlacementIndex:
    """A fleet's nodes ranked once per snapshot."""

    ranked: tuple[tuple[float, int, str], ...]
    """(base headroom, free GPUs, node) for every node with room, best first."""
    avoided: tuple[NodeAvoidance, ...]
    total_free: int
    stale: bool
    topology: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Node → (topology label, value), tightest domain first, where telemetry knows them."""
    queueing: frozenset[tuple[str, str]] = frozenset()
    """(namespace, workload) of the services whose replicas are over their serving target
    (`scoring.ingest.serving.queueing_workloads`): their new replicas are urgent."""


def index_fleet(fleet: FleetHeat, topology: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
                queueing: frozenset[tuple[str, str]] = frozenset()) -> PlacementIndex:
    """Nodes with a degraded GPU are avoided, and excluded as unhealthy ones are: a GPU its pod
    left (the descheduler moved it, or it ended) is the one a new pod there is likely given."""
    degraded = {node.name for node in fleet.nodes if degraded_units(node.reasons)}
    ranked = [(base, node.gpus_free, node.name) for node in fleet.nodes
              if node.name not in degraded and (base := base_headroom(node)) > 0]
    ranked.sort(key=lambda entry: (-entry[0], -entry[1], entry[2]))
    avoided = tuple(NodeAvoidance(n.name, str(n.tier) + (f", {why}" if (why := signals.explain(n.reasons)) else ""),
                                  n.tier == Tier.UNHEALTHY or n.name in degraded)
                    for n in fleet.nodes if n.tier >= Tier.HOT or n.name in degraded)
    return PlacementIndex(tuple(ranked), avoided, sum(free for _, free, _ in ranked), fleet.stale, dict(topology or {}),
                          queueing)


class _ViewDomains(Mapping[str, tuple[tuple[str, str], ...]]):
    """Node → its packing domains, tightest first, read on demand (a job's admission asks only
    about the ranked nodes) from the cluster view's node labels, else from telemetry's."""

    def __init__(self, view: ClusterView, keys: tuple[str, ...],
                 telemetry: Mapping[str, tuple[tuple[str, str], ...]]) -> None:
        self._nodes, self._keys, self._telemetry = view.nodes, keys, telemetry

    def __getitem__(self, node: str) -> tuple[tuple[str, str], ...]:
        facts = self._nodes.get(node)
        found = tuple((key, facts.labels[key]) for key in self._keys if facts.labels.get(key)) if facts else ()
        return found or self._telemetry[node]

    def __iter__(self):
        return iter(self._nodes.keys() | self._telemetry.keys())

    def __len__(self) -> int:
        return len(self._nodes.keys() | self._telemetry.keys())


def node_domains(index: PlacementIndex, view: ClusterView | None, policy: PlacementPolicy
                 ) -> Mapping[str, tuple[tuple[str, str], ...]]:
    """Each node's packing domains. The cluster view's node labels where there is a view:
    telemetry knows them only where kube-state-metrics exports `kube_node_labels` with those
    labels allowed, and without them a job's first worker got no domain at all (issue 47)."""
    return index.topology if view is None else _ViewDomains(view, policy.packing_domains, index.topology)


def advise_group(index: PlacementIndex, *, gpus_requested: int, pending_gpus: Mapping[str, int],
                 policy: PlacementPolicy, chosen_before: tuple[str, str] | None = None,
                 fits: Callable[[str], int] | None = None, job_size: int | None = None,
                 topology: Mapping[str, tuple[tuple[str, str], ...]] | None = None,
                 ready_share: Callable[[str], float] | None = None) -> NodeAdvice:
    """For a member of a distributed job: prefer the nodes of the one domain (NVLink clique, else
    network block, else zone) with the coolest room — free GPUs not yet promised, each weighted by
    its node's headroom — among those with room for the whole job (`job_size` pods, where the pod
    says; else any with room), so that the job's pod affinity finds room to pack, next to as little
    serving load as it can: the job keeps its GPUs busy for hours, and its node's other tenants
    feel it. The domain `chosen_before` for the same job is kept for every later worker, even when
    telemetry shows it full: that telemetry is older than the room the job's own scheduling sees,
    and switching domains would split the job for certain, while staying only risks the scheduler
    finding no room there. A later worker gets the domain as a required term while the domain has
    room for it. `topology` (node → domain labels) defaults to the telemetry's; the cluster view's
    node labels are the better source where there is a view. No domain known: no per-node
    preference at all. `fits` (from the cluster view, where there is one) says how many more
    such pods a node has room for: telemetry cannot see devices a DRA claim holds. Only nodes
    with room for the pod are preferred. `ready_share` (node → the share of the horizon the pod
    would serve there, `scoring.advice.readiness.serving_share`) weighs each node's headroom, in
    the domain's room and in the ranking inside it: a group's every pod pulls where its node lacks
    the image, and the group serves only once its last pod is ready."""
    if index.stale:
        return NO_ADVICE
    need = max(1, gpus_requested)
    domains = index.topology if topology is None else topology
    room: dict[tuple[str, str], int] = {}
    cool_room: dict[tuple[str, str], float] = {}
    members: dict[tuple[str, str], list[tuple[bool, float, int, str]]] = {}
    anywhere = False  # room for this pod on some node, in a known domain or not
    for base, free, name in index.ranked:
        labels = domains.get(name, ())
        unpromised = free - pending_gpus.get(name, 0)
        slots = max(0, unpromised // need)
        if slots and fits is not None:  # the view's room, asked only where telemetry shows some
            slots = max(0, min(slots, fits(name)))
        anywhere = anywhere or slots > 0
        if not labels:
            continue
        domain = labels[0]  # the tightest domain this node's labels name
        score = headroom(base, free, pending_gpus.get(name, 0)) if slots else 0.0
        if slots and ready_share is not None:
            score *= ready_share(name)
        room[domain] = room.get(domain, 0) + slots * need
        cool_room[domain] = cool_room.get(domain, 0.0) + slots * score
        members.setdefault(domain, []).append((slots > 0, score, max(0, unpromised), name))
    required = False
    if chosen_before in members:
        domain, why = chosen_before, "kept for the job"
        required = room[domain] >= need
    elif any(room.values()):
        whole = need * max(1, job_size or 1)
        fitting = [d for d, gpus in room.items() if gpus >= whole] or [d for d, gpus in room.items() if gpus]
        domain = max(fitting, key=lambda d: (cool_room[d], room[d], d))
        why = f"has room ({room[domain]} GPUs" + (f" of {whole} for {job_size} workers)" if job_size else ")")
    else:
        why_none = f"no domain has room for {need} GPU(s)" if members else "no topology known"
        excluded, left_open = _exclusions(index, fits_elsewhere=anywhere, spare=-1, policy=policy)
        return NodeAdvice((), index.avoided, excluded, f"distributed job: {why_none}, packed by pod affinity",
                          left_open=left_open)
    excluded, left_open = _exclusions(index, fits_elsewhere=room[domain] >= need,
                                      spare=sum(room.values()) - need, policy=policy)
    best = [member for member in sorted(members[domain], reverse=True) if member[0]][:policy.max_preferred_nodes]
    top = max(best[0][1], 1e-9) if best else 1.0
    preferred = tuple(NodePreference(name, max(1, round(100 * score / top))) for _, score, _, name in best)
    return NodeAdvice(preferred, index.avoided, excluded, f"distributed job: {domain[0]}={domain[1]} {why}", domain,
                      domain_required=required, left_open=left_open)


Candidate = tuple[float, int, str]
"""(headroom after pending load, free GPUs not yet promised, node), compared best-last."""


def rank(index: PlacementIndex, *, need: int, pending_gpus: Mapping[str, int], k: int) -> list[Candidate]:
    """The K best nodes with at least `need` unpromised free GPUs, best first. Walks the ranking
    only until no later node can beat the K-th: pending load only ever lowers a score."""
    best: list[tuple[float, int, int, str]] = []  # min-heap; ties go to the earlier-ranked node
    for position, (base, free, name) in enumerate(index.ranked):
        if len(best) == k and base < best[0][0]:
            break
        pending = pending_gpus.get(name, 0)
        if free - pending < need:
            continue
        entry = (headroom(base, free, pending), free - pending, -position, name)
        if len(best) < k:
            heapq.heappush(best, entry)
        elif entry > best[0]:
            heapq.heapreplace(best, entry)
    return [(score, free, name) for score, free, _, name in sorted(best, reverse=True)]


def _exclusions(index: PlacementIndex, *, fits_elsewhere: bool, spare: int, policy: PlacementPolicy
                ) -> tuple[tuple[str, ...], str]:
    """The avoided nodes for the required NotIn, and why any avoided node is left open.

    Unhealthy nodes are excluded whenever the pod has room elsewhere (`fits_elsewhere`, counted
    with the cluster view where there is one): a pod there fails or waits for a reset. Hot nodes
    only by policy (`hardAvoidHot`), and only while cool and warm nodes keep `spare` GPUs beyond
    the pod's own (at least `hardAvoidMinSpareGpus`): a hot node still runs a pod, and telemetry
    can be wrong. Where the pod fits nowhere else, nothing is excluded: a pod kept pending helps
    no one, so the pod says so instead."""
    if not index.avoided:
        return (), ""
    if not fits_elsewhere:
        return (), "not excluded: no other node has room for the pod"
    names = [a.node for a in index.avoided if a.unhealthy]
    left_open = ""
    if policy.hard_avoid_hot and len(names) < len(index.avoided):
        if spare >= policy.hard_avoid_min_spare_gpus and len(index.avoided) <= policy.max_avoided_nodes:
            names = [a.node for a in index.avoided]
        else:
            left_open = "hot nodes not excluded: too little cool capacity or too many hot nodes"
    return tuple(names[:policy.max_avoided_nodes]), left_open


def advise(index: PlacementIndex, *, gpus_requested: int, pending_gpus: Mapping[str, int],
           policy: PlacementPolicy, ranked: list[Candidate] | None = None,
) -> NodeAdvice:
    """Preferred and avoided nodes for a pod that needs `gpus_requested` whole GPUs (0 for a
    fractional or shared GPU: any node with a free GPU will do). A caller that keeps the ranking
    incrementally (`webhook.ledger`) passes `ranked` (equal to `rank(...)`)."""
    if index.stale:
        return NO_ADVICE
    need = max(1, gpus_requested)
    if ranked is None:
        ranked = rank(index, need=need, pending_gpus=pending_gpus, k=policy.max_preferred_nodes)
    best = max(ranked[0][0], 1e-12) if ranked else 1.0
    preferred = tuple(NodePreference(name, preference_weight(score / best, rank))
                      for rank, (score, _, name) in enumerate(ranked) if score > 0)
    # Spare room counted on the K candidates alone (their GPUs not yet promised): a lower bound
    # that costs O(K), and that bookings on hot or unhealthy nodes do not eat into.
    excluded, left_open = _exclusions(index, fits_elsewhere=bool(preferred),
                                      spare=sum(free for _, free, _ in ranked) - need, policy=policy)
    if not preferred:
        reason = f"no cool or warm node the pod can use has {need} free unit(s)"
    else:
        reason = "ranked by idle cycles, memory room and free GPUs not yet promised"
    return NodeAdvice(preferred, index.avoided, excluded, reason, left_open=left_open)
