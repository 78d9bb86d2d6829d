"""The steering ledger: GPUs promised to nodes by recent advice, not yet visible in telemetry.

In-process state with a lock, no I/O. Each admission adds the GPUs of its top preference; an
entry is forgotten once telemetry at least `settle_seconds` newer than it exists, because by
then the pod's load shows in DCGM (or the pod went elsewhere and the promise was wrong anyway).
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from datetime import datetime, timedelta


class SteeringLedger:
    def __init__(self, settle_seconds: float) -> None:
        self._settle = timedelta(seconds=settle_seconds)
        self._entries: deque[tuple[datetime, str, int]] = deque()
        self._pending: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    def record(self, node: str, gpus: int, at: datetime) -> None:
        with self._lock:
            self._entries.append((at, node, gpus))
            self._pending[node] += gpus

    def pending(self, telemetry_time: datetime | None) -> dict[str, int]:
        """GPUs promised per node that telemetry taken at `telemetry_time` cannot show yet."""
        with self._lock:
            if telemetry_time is not None:
                while self._entries and self._entries[0][0] + self._settle <= telemetry_time:
                    _, node, gpus = self._entries.popleft()
                    self._pending[node] -= gpus
                    if self._pending[node] <= 0:
                        del self._pending[node]
            return dict(self._pending)
