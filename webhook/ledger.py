"""The in-flight ledger: GPU units bound or promised since the telemetry was taken. No I/O.

In-process state behind a lock. Bookings come from two sources: the bindings the cluster view's
watch shows (from every webhook replica, and pods that were never steered), and this replica's
provisional bookings for pods it steered that are not bound yet. When a steered pod's binding
arrives, its provisional booking moves to the node it actually bound to. A booking is forgotten
once telemetry at least `settle_seconds` newer than it exists: by then its load shows in DCGM.

Bookings do two things. They lower a node's headroom (load the telemetry cannot show yet), and,
with a cluster view, they take room: free units are the view's exact free count less bookings
the view does not yet hold. Without a view, room is the telemetry's free GPUs less bookings.

For each constraint signature (`scoring.cluster.feasibility.PodConstraints`) the ledger keeps the
snapshot's ranking restricted to feasible nodes, as a heap of headroom-after-bookings scores that
replays only the nodes whose bookings changed, so `top` costs O(K log n) however many nodes hold
bookings. It returns exactly what `scoring.advice.placement.rank` would on the feasible sub-index.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scoring.advice.placement import Candidate, PlacementIndex, headroom
from scoring.cluster.feasibility import FeasibleSets, PodConstraints
from scoring.cluster.view import Binding, ClusterView

_NONE: Counter = Counter()
MAX_SIGNATURES = 256
"""Feasible rankings kept per snapshot; signatures come from pods, so they are bounded."""
PREPARED_SIGNATURES = 32
"""Signatures (most recently used) ranked anew at each refresh, off the admission path."""


@dataclass(slots=True)
class _Booking:
    node: str
    units: tuple[tuple[str, int], ...]
    at: datetime
    pod: str = ""
    """namespace/name once bound; empty while provisional."""


def _unbooked(view: ClusterView, unseen: dict[str, Counter], node: str, resource: str) -> int:
    """The view's free units of `resource` on `node`, less the bookings the view does not hold yet."""
    return view.free_units(node, resource) - unseen.get(node, _NONE)[resource]


class _Ranking:
    """One signature's feasible sub-index and its heap of (-score, -room, position, name)."""

    __slots__ = ("index", "members", "heap", "synced", "units")

    def __init__(self, index: PlacementIndex, units: tuple[tuple[str, int], ...], changes: int) -> None:
        self.index = index
        self.units = units
        self.members = {name: (base, free, position) for position, (base, free, name) in enumerate(index.ranked)}
        self.heap: list[tuple[float, int, int, str]] = []
        self.synced = changes


class SteeringLedger:
    def __init__(self, settle_seconds: float, replica: str = "") -> None:
        self._settle = timedelta(seconds=settle_seconds)
        self._replica = replica
        self._serial = itertools.count(1)
        self._bookings: dict[str, _Booking] = {}
        self._by_pod: dict[str, str] = {}  # namespace/name → key of its booking, once bound
        self._order: list[tuple[datetime, str]] = []
        """A min-heap by booking time: bindings seen on a relist carry their own, earlier times, in
        the list's order, so appending them would not keep the times in order."""
        self._pending: Counter = Counter()  # node → units booked (heat)
        self._unseen: dict[str, Counter] = defaultdict(Counter)  # node → resource → units the view lacks
        self._total = 0
        self._lock = threading.Lock()
        self._index: PlacementIndex | None = None
        self._view: ClusterView | None = None
        self._feasible: FeasibleSets | None = None
        self._rankings: OrderedDict[PodConstraints | None, _Ranking] = OrderedDict()
        self._changes: list[str] = []
        self._groups: dict[str, tuple[tuple[str, str], datetime]] = {}
        self._group_order: deque[tuple[datetime, str]] = deque()

    # -- bookings ---------------------------------------------------------------------------

    def booking_id(self) -> str:
        """A fresh id for the booking annotation of a pod this replica steers."""
        return f"{self._replica}{next(self._serial)}"

    def record(self, node: str, units: int | tuple[tuple[str, int], ...], at: datetime,
               booking: str | None = None) -> None:
        """A provisional booking for a pod steered to `node` and not bound yet."""
        if isinstance(units, int):
            units = (("nvidia.com/gpu", units),)
        with self._lock:
            key = booking or f"~{next(self._serial)}"
            self._add(key, _Booking(node, units, at))

    def bind(self, binding: Binding) -> None:
        """A pod seen bound: its provisional booking (ours) moves there, or a new booking is made."""
        with self._lock:
            own = self._bookings.get(binding.booking) if binding.booking else None
            if own is not None and own.pod:
                return  # this binding was already seen
            if own is not None:
                self._remove(binding.booking)
            key = binding.booking if own is not None else f"pod:{binding.pod}"
            if key in self._bookings:
                return
            self._add(key, _Booking(binding.node, binding.units, max(binding.at, own.at) if own else binding.at,
                                    binding.pod))

    def unbind(self, pod: str) -> None:
        """A bound pod seen gone (deleted, finished, or missing from a relist) before its booking
        settled: the load it promised will not come, so the booking goes with it."""
        with self._lock:
            key = self._by_pod.get(pod)
            if key is not None:
                self._remove(key)

    def _add(self, key: str, booking: _Booking) -> None:
        self._bookings[key] = booking
        if booking.pod:
            self._by_pod[booking.pod] = key
        heapq.heappush(self._order, (booking.at, key))
        self._count(booking, +1)

    def _remove(self, key: str) -> None:
        booking = self._bookings.pop(key)
        if booking.pod and self._by_pod.get(booking.pod) == key:
            del self._by_pod[booking.pod]
        self._count(booking, -1)

    def _count(self, booking: _Booking, sign: int) -> None:
        size = sum(units for _, units in booking.units)
        self._pending[booking.node] += sign * size
        if self._pending[booking.node] <= 0:
            del self._pending[booking.node]
        self._total += sign * size
        if self._view is not None and not self._in_view(booking):
            unseen = self._unseen[booking.node]
            unseen.update({resource: sign * units for resource, units in booking.units})
            if not +unseen:
                del self._unseen[booking.node]
        self._changes.append(booking.node)

    def _in_view(self, booking: _Booking) -> bool:
        return self._view is not None and bool(booking.pod) and booking.pod in self._view.bound

    def pending(self, telemetry_time: datetime | None) -> dict[str, int]:
        """Units booked per node that telemetry taken at `telemetry_time` cannot show yet."""
        with self._lock:
            self._expire(telemetry_time)
            return dict(self._pending)

    def fits(self, units: tuple[tuple[str, int], ...]) -> Callable[[str], int] | None:
        """With a cluster view: a function giving how many more pods asking for `units` fit on a
        node, by the view's free units less the bookings it does not hold yet. Without one, None
        (room is then telemetry's free GPUs less `pending`)."""
        if self._view is None or not units:
            return None
        view, unseen = self._view, self._unseen

        def copies(name: str) -> int:  # a read of one node's counters: no lock needed under the GIL
            return min(_unbooked(view, unseen, name, resource) // max(1, count) for resource, count in units)

        return copies

    # -- distributed jobs -------------------------------------------------------------------

    def group_domain(self, group: str, telemetry_time: datetime | None) -> tuple[str, str] | None:
        """The domain chosen for a distributed job's earlier workers, until telemetry can show them."""
        with self._lock:
            self._expire(telemetry_time)
            entry = self._groups.get(group)
            return None if entry is None else entry[0]

    def remember_group(self, group: str, domain: tuple[str, str], at: datetime) -> None:
        with self._lock:
            self._groups[group] = (domain, at)
            self._group_order.append((at, group))

    def groups_remembered(self) -> int:
        with self._lock:
            return len(self._groups)

    # -- ranking ----------------------------------------------------------------------------

    def prepare(self, index: PlacementIndex, view: ClusterView | None = None) -> None:
        """Take a new snapshot (and the cluster view read with it) and rank its nodes now, so
        the next admission does not have to: with a view, for the constraint signatures the last
        snapshot was asked about. Their feasible sets (a pass over every node each) are worked
        out before the lock is taken, so admissions do not wait on them."""
        feasible = None
        recent: list[PodConstraints | None] = [None]
        names: dict[PodConstraints | None, frozenset[str] | None] = {None: None}
        if view is not None:
            with self._lock:
                recent = [key for key in self._rankings if key is not None][-PREPARED_SIGNATURES:]
            feasible = FeasibleSets(view.nodes)
            names = {key: feasible(key) for key in recent}
        with self._lock:
            if index is not self._index or view is not self._view:
                self._attach(index, view, feasible)
            wanted = [key for key in recent if key not in self._rankings]
        # Each ranking (a pass over every feasible node) is built outside the lock, so admissions
        # wait on none of them: at 5,000 nodes five signatures held them up for ~65 ms.
        for key in wanted:
            ranking = self._build(key, names[key])
            with self._lock:
                if self._index is not index or self._view is not view:
                    return  # a newer snapshot was taken meanwhile; its own prepare ranks it
                self._keep(key, ranking)

    @property
    def view(self) -> ClusterView | None:
        return self._view

    def feasible_index(self, index: PlacementIndex, pod: PodConstraints | None) -> PlacementIndex:
        """The snapshot's ranking restricted to nodes the pod could use (the whole ranking
        without a cluster view)."""
        with self._lock:
            if index is not self._index:
                self._attach(index, self._view)
            return self._ranking(pod).index

    def top(self, index: PlacementIndex, telemetry_time: datetime | None, *, need: int, k: int,
            pod: PodConstraints | None = None, also: Callable[[str], bool] | None = None,
            also_k: int = 0) -> tuple[list[Candidate], int]:
        """The K best feasible candidates with room (as `rank` gives them on the feasible
        sub-index), then up to `also_k` more of the next best for which `also` holds (the nodes
        that cache the pod's model, wherever they rank), and all units booked."""
        with self._lock:
            if index is not self._index:
                self._attach(index, self._view)
            self._expire(telemetry_time)
            ranking = self._ranking(pod)
            self._sync(ranking)
            units = ranking.units or (("", need),)
            chosen: list[Candidate] = []
            extra = 0
            keep: list[tuple[float, int, int, str]] = []
            seen: set[str] = set()
            while ranking.heap and (len(chosen) < k or (also is not None and extra < also_k)):
                entry = heapq.heappop(ranking.heap)
                name = entry[3]
                if name in seen or entry != self._entry(ranking, name):
                    continue  # superseded by a newer push, or a duplicate: drop it for good
                seen.add(name)
                keep.append(entry)
                if len(chosen) >= k and not also(name):
                    continue
                if all(self._room(ranking, name, resource) >= count for resource, count in units):
                    chosen.append((-entry[0], -entry[1], name))
                    extra += len(chosen) > k
            for entry in keep:
                heapq.heappush(ranking.heap, entry)
            return chosen, self._total

    def _ranking(self, pod: PodConstraints | None) -> _Ranking:
        """The signature's ranking, built now if this snapshot has none yet (under the lock)."""
        key = pod if self._view is not None else None
        ranking = self._rankings.get(key)
        if ranking is not None:
            self._rankings.move_to_end(key)
            return ranking
        feasible = self._feasible(key) if key is not None and self._feasible is not None else None
        return self._keep(key, self._build(key, feasible))

    def _build(self, key: PodConstraints | None, feasible: frozenset[str] | None) -> _Ranking:
        """A signature's sub-index of the `feasible` nodes (all, when None) and its heap. Safe
        without the lock: it only reads the bookings, and takes its place in `_changes` first, so
        any booking made while it runs is replayed by `_sync` (entries it got wrong meanwhile are
        dropped by `top` as stale)."""
        index = self._index
        assert index is not None
        if feasible is not None:
            index = PlacementIndex(
                tuple(entry for entry in index.ranked if entry[2] in feasible),
                tuple(a for a in index.avoided if a.node in feasible),
                sum(free for _, free, name in index.ranked if name in feasible), index.stale, index.topology)
        ranking = _Ranking(index, key.units if key is not None else (), len(self._changes))
        ranking.heap = [entry for name in ranking.members if (entry := self._entry(ranking, name)) is not None]
        heapq.heapify(ranking.heap)
        return ranking

    def _keep(self, key: PodConstraints | None, ranking: _Ranking) -> _Ranking:
        kept = self._rankings.setdefault(key, ranking)  # an admission may have built it first
        self._rankings.move_to_end(key)
        if len(self._rankings) > MAX_SIGNATURES:
            self._rankings.popitem(last=False)
        return kept

    def _room(self, ranking: _Ranking, name: str, resource: str) -> int:
        base_free = ranking.members[name][1]
        if self._view is None or not resource:
            return base_free - self._pending.get(name, 0)
        return _unbooked(self._view, self._unseen, name, resource)

    def _entry(self, ranking: _Ranking, name: str) -> tuple[float, int, int, str] | None:
        base, free, position = ranking.members[name]
        primary = ranking.units[0][0] if ranking.units else ""
        room = self._room(ranking, name, primary)
        score = headroom(base, free, self._pending.get(name, 0))
        # No room for every unit the signature needs (so the heap holds only nodes the pod fits:
        # `top` pops K of them, not every node too small for a large pod), or telemetry's free
        # GPUs all taken by bookings it cannot show yet (the view may still count free units
        # there: the bookings' load is coming all the same).
        if room <= 0 or score <= 0 or any(self._room(ranking, name, resource) < count
                                          for resource, count in ranking.units):
            return None
        return -score, -room, position, name

    def _sync(self, ranking: _Ranking) -> None:
        """Push fresh entries for the nodes whose bookings changed since this ranking last looked."""
        for name in set(self._changes[ranking.synced:]):
            if name in ranking.members and (entry := self._entry(ranking, name)) is not None:
                heapq.heappush(ranking.heap, entry)
        ranking.synced = len(self._changes)

    def _attach(self, index: PlacementIndex, view: ClusterView | None, feasible: FeasibleSets | None = None) -> None:
        self._index, self._view = index, view
        if view is None:
            self._feasible = None
        else:
            self._feasible = feasible if feasible is not None else FeasibleSets(view.nodes)
        self._rankings.clear()
        self._changes = []
        self._unseen = defaultdict(Counter)
        if view is None:
            return  # without a view, room is telemetry's free GPUs less `_pending`
        for booking in self._bookings.values():
            if not self._in_view(booking):
                self._unseen[booking.node].update(dict(booking.units))

    def _expire(self, telemetry_time: datetime | None) -> None:
        if telemetry_time is None:
            return
        while self._order and self._order[0][0] + self._settle <= telemetry_time:
            at, key = heapq.heappop(self._order)
            booking = self._bookings.get(key)
            if booking is not None and booking.at == at:
                self._remove(key)
        # Training jobs are forgotten with their telemetry like every booking, whether or not the
        # same job is asked about again; a job remembered anew has a later entry of its own.
        while self._group_order and self._group_order[0][0] + self._settle <= telemetry_time:
            at, group = self._group_order.popleft()
            if (entry := self._groups.get(group)) is not None and entry[1] == at:
                del self._groups[group]
