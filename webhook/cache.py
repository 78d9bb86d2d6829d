"""The telemetry cache: a background thread that refreshes what admissions read; they never wait on it.

Does I/O through the injected `read` function: `webhook.refresher.ChildProcessReader` in
production, or `assessing(...)` around any snapshot reader (tests, demo, benchmark). What one
refresh computes is `webhook.refresh`'s, which the simulator calls too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone

from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy
from webhook.refresh import Telemetry, assess

log = logging.getLogger("gpu_balancer.webhook.cache")


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def assessing(read: Callable[[], ClusterSnapshot], policy: BalancerPolicy,
              clock: Callable[[], datetime] = _utcnow) -> Callable[[], Telemetry]:
    """A `read` for `SnapshotCache` that reads and assesses a snapshot in this process."""
    return lambda: assess(read(), policy, clock())


class SnapshotCache:
    def __init__(self, read: Callable[[], Telemetry], policy: BalancerPolicy, *,
                 on_error: Callable[[Exception], None] = lambda error: None,
                 on_stop: Callable[[], None] = lambda: None) -> None:
        self._read = read
        self._on_stop = on_stop
        self._policy = policy
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
            telemetry = self._read()
        except Exception as error:  # noqa: BLE001 - any failure means "keep the old telemetry"
            self.last_error = str(error)
            self._on_error(error)
            log.warning("telemetry refresh failed: %s", error)
            return
        for listener in self.on_refresh:
            listener(telemetry)
        self._current = telemetry
        self.last_error = None

    def fresh(self, now: datetime) -> Telemetry | None:
        """The current telemetry if it is within the staleness limit, else None."""
        current = self._current
        if current is None or not current.nodes:
            return None
        if current.age_seconds(now) > self._policy.telemetry.staleness_limit_seconds:
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
