"""The steering ledger: GPUs promised to nodes by recent advice, not yet visible in telemetry.

In-process state behind a lock, no I/O. Each admission adds the GPUs of its top preference; an
entry is forgotten once telemetry at least `settle_seconds` newer than it exists, because by
then the pod's load shows in DCGM (or the pod went elsewhere and the promise was wrong anyway).

The ledger also keeps the current snapshot's node ranking as a heap of headroom-after-pending
scores, updated as promises are made and forgotten, so `top` costs O(K log n) even when a burst
has promised GPUs on thousands of nodes. It returns exactly what `scoring.placement.rank` would.
"""

from __future__ import annotations

import heapq
import threading
from collections import defaultdict, deque
from datetime import datetime, timedelta

from scoring.placement import Candidate, PlacementIndex, headroom


class SteeringLedger:
    def __init__(self, settle_seconds: float) -> None:
        self._settle = timedelta(seconds=settle_seconds)
        self._entries: deque[tuple[datetime, str, int]] = deque()
        self._pending: dict[str, int] = defaultdict(int)
        self._total = 0
        self._lock = threading.Lock()
        self._index: PlacementIndex | None = None
        self._nodes: dict[str, tuple[float, int, int]] = {}  # name: (base, free, position in ranking)
        self._heap: list[tuple[float, int, int, str]] = []  # (-score, -unpromised, position, name)
        self._groups: dict[str, tuple[tuple[str, str], datetime]] = {}
        self._group_order: deque[tuple[datetime, str]] = deque()

    def record(self, node: str, gpus: int, at: datetime) -> None:
        with self._lock:
            self._entries.append((at, node, gpus))
            self._pending[node] += gpus
            self._total += gpus
            self._push(node)

    def pending(self, telemetry_time: datetime | None) -> dict[str, int]:
        """GPUs promised per node that telemetry taken at `telemetry_time` cannot show yet."""
        with self._lock:
            self._expire(telemetry_time)
            return dict(self._pending)

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

    def prepare(self, index: PlacementIndex) -> None:
        """Rank a new snapshot's nodes now (O(n log n)), so the next admission does not have to."""
        with self._lock:
            if index is not self._index:
                self._attach(index)

    def top(self, index: PlacementIndex, telemetry_time: datetime | None, *, need: int, k: int
            ) -> tuple[list[Candidate], int]:
        """The K best candidates for `index` (as `rank` would give them) and all GPUs promised."""
        with self._lock:
            if index is not self._index:
                self._attach(index)
            self._expire(telemetry_time)
            chosen: list[Candidate] = []
            keep: list[tuple[float, int, int, str]] = []
            seen: set[str] = set()
            while self._heap and len(chosen) < k:
                entry = heapq.heappop(self._heap)
                name = entry[3]
                if name in seen or entry != self._entry(name):
                    continue  # superseded by a newer push, or a duplicate: drop it for good
                seen.add(name)
                keep.append(entry)
                if -entry[1] >= need:
                    chosen.append((-entry[0], -entry[1], name))
            for entry in keep:
                heapq.heappush(self._heap, entry)
            return chosen, self._total

    def _entry(self, name: str) -> tuple[float, int, int, str] | None:
        base, free, position = self._nodes[name]
        unpromised = free - self._pending.get(name, 0)
        if unpromised <= 0:
            return None
        return -headroom(base, free, self._pending.get(name, 0)), -unpromised, position, name

    def _push(self, name: str) -> None:
        if name in self._nodes and (entry := self._entry(name)) is not None:
            heapq.heappush(self._heap, entry)

    def _attach(self, index: PlacementIndex) -> None:
        self._index = index
        self._nodes = {name: (base, free, position) for position, (base, free, name) in enumerate(index.ranked)}
        self._heap = [entry for name in self._nodes if (entry := self._entry(name)) is not None]
        heapq.heapify(self._heap)

    def _expire(self, telemetry_time: datetime | None) -> None:
        if telemetry_time is None:
            return
        while self._entries and self._entries[0][0] + self._settle <= telemetry_time:
            _, node, gpus = self._entries.popleft()
            self._pending[node] -= gpus
            self._total -= gpus
            if self._pending[node] <= 0:
                del self._pending[node]
            self._push(node)
        # Training jobs are forgotten with their telemetry like every booking, whether or not the
        # same job is asked about again; a job remembered anew has a later entry of its own.
        while self._group_order and self._group_order[0][0] + self._settle <= telemetry_time:
            at, group = self._group_order.popleft()
            if (entry := self._groups.get(group)) is not None and entry[1] == at:
                del self._groups[group]
