"""The snapshot cache: a background thread that refreshes telemetry; admissions never wait on it.

Does I/O through the injected `read` function (normally `scoring.prometheus.read_snapshot`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from scoring.heat import FleetHeat, fleet_heat
from scoring.placement import PlacementIndex, index_fleet
from scoring.policy import BalancerPolicy
from scoring.telemetry import ClusterSnapshot

log = logging.getLogger("gpu_balancer.webhook.cache")


@dataclass(frozen=True, slots=True)
class Telemetry:
    """What the last successful refresh saw."""

    snapshot: ClusterSnapshot
    fleet: FleetHeat
    index: PlacementIndex


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class SnapshotCache:
    def __init__(self, read: Callable[[], ClusterSnapshot], policy: BalancerPolicy, *,
                 clock: Callable[[], datetime] = _utcnow,
                 on_error: Callable[[Exception], None] = lambda error: None,
                 on_stop: Callable[[], None] = lambda: None) -> None:
        self._read = read
        self._on_stop = on_stop
        self._policy = policy
        self._clock = clock
        self._on_error = on_error
        self._current: Telemetry | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.on_refresh: list[Callable[[Telemetry], None]] = []
        """Called in the refresh thread with each new telemetry, e.g. to re-rank off the request path."""

    @property
    def current(self) -> Telemetry | None:
        return self._current  # one reference read: atomic, no lock needed

    def refresh_once(self) -> None:
        try:
            snapshot = self._read()
        except Exception as error:  # noqa: BLE001 - any failure means "keep the old snapshot"
            self.last_error = str(error)
            self._on_error(error)
            log.warning("telemetry refresh failed: %s", error)
            return
        fleet = fleet_heat(snapshot, self._policy.heat, now=self._clock(),
                           staleness_limit_seconds=self._policy.telemetry.staleness_limit_seconds)
        telemetry = Telemetry(snapshot, fleet, index_fleet(fleet, {n.name: n.topology for n in snapshot.nodes
                                                                   if n.topology}))
        for listener in self.on_refresh:
            listener(telemetry)
        self._current = telemetry
        self.last_error = None

    def fresh(self, now: datetime) -> Telemetry | None:
        """The current telemetry if it is within the staleness limit, else None."""
        current = self._current
        if current is None or not current.snapshot.nodes:
            return None
        if current.snapshot.age_seconds(now) > self._policy.telemetry.staleness_limit_seconds:
            return None
        return current

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh_once()
            self._stop.wait(self._policy.telemetry.refresh_seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="snapshot-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._on_stop()
