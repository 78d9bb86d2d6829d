"""Read and assess telemetry in a child process, so that work never holds the webhook's GIL.

Does I/O: a `spawn`ed process runs `scoring.ingest.prometheus.SnapshotReader` and `webhook.refresh.assess`
on request and sends the small `Telemetry` (the ranked fleet, no per-GPU data) back through a
pipe. At 5,000 nodes the read costs 0.3–0.6 s of CPU and the assessment ~90 ms; in the webhook
process both would stall admissions, from the child they cost the parent one short unpickle.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from multiprocessing.connection import Connection

from scoring.ingest.prometheus import TelemetryError
from scoring.ingest.telemetry import ClusterSnapshot
from scoring.policy import BalancerPolicy
from webhook.refresh import Telemetry, assess

CHILD_NICENESS = 10
STARTUP_GRACE_SECONDS = 20.0
"""Extra time a new child has for its first answer: a spawned interpreter imports the project first."""
log = logging.getLogger("gpu_balancer.webhook.refresher")


def _serve(policy: BalancerPolicy, connection: Connection, read: Callable[[], ClusterSnapshot] | None) -> None:
    # Lower priority than the admissions it feeds: on a busy node the scheduler then runs the
    # webhook's request path first and this refresh in the gaps (a few seconds late is harmless).
    os.nice(CHILD_NICENESS)
    if read is None:
        from scoring.ingest.prometheus import SnapshotReader, connect

        read = SnapshotReader(connect(policy.prometheus), policy)
    while True:
        try:
            if connection.recv() is None:
                return
        except (EOFError, OSError):
            return
        try:
            connection.send(("ok", assess(read(), policy, datetime.now(timezone.utc))))
        except TelemetryError as error:
            connection.send(("telemetry-error", str(error)))
        except Exception as error:  # noqa: BLE001 - report, never die: the parent keeps its old snapshot
            connection.send(("error", f"{type(error).__name__}: {error}"))


def hang_timeout_seconds(policy: BalancerPolicy) -> float:
    """How long a read may take before the child counts as hung: a few refresh intervals, and
    never less than a read that waits out Prometheus' timeout twice over."""
    return max(3 * policy.telemetry.refresh_seconds, 2 * policy.prometheus.timeout_seconds + 5)


class ChildProcessReader:
    """A `read()` for `SnapshotCache` that runs in a child process; `close()` ends the child.

    A child that has exited, or does not answer within `hang_timeout_seconds`, is killed and
    replaced: at once the first time, then after a backoff doubling up to `max_backoff_seconds`
    while replacements keep failing. `failing_seconds()` says for how long no child has answered,
    for the liveness probe. The child reads Prometheus as `policy` says, unless `read` (a
    picklable callable returning a `ClusterSnapshot`, run in the child) is given instead."""

    def __init__(self, policy: BalancerPolicy, *, read: Callable[[], ClusterSnapshot] | None = None,
                 hang_timeout: float | None = None, max_backoff_seconds: float = 30.0,
                 on_restart: Callable[[str], None] = lambda reason: None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._policy, self._read = policy, read
        self._timeout = hang_timeout if hang_timeout is not None else hang_timeout_seconds(policy)
        self._max_backoff = max_backoff_seconds
        self._on_restart = on_restart
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._failures = 0
        self._failing_since: float | None = None
        self._next_spawn_at = 0.0
        self.restarts = 0
        self._spawn()

    def _spawn(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(self._policy, child, self._read),
                                        name="telemetry-reader", daemon=True)
        self._process.start()
        child.close()
        self._grace = STARTUP_GRACE_SECONDS

    def _retire(self, kind: str, detail: str = "") -> None:
        """Kill the child (SIGKILL ends a stopped one too) and schedule its replacement; `kind`
        ("exited", "hung") labels the restart metric."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join(timeout=5)
        self._parent.close()
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = self._monotonic()
        backoff = 0.0 if self._failures == 1 else min(self._max_backoff, 2.0 ** (self._failures - 2))
        self._next_spawn_at = self._monotonic() + backoff
        self._process = None  # type: ignore[assignment]
        log.warning("telemetry reader %s%s; replacing it%s", kind, detail,
                    f" in {backoff:.0f}s" if backoff else " now")
        self._on_restart(kind)

    def __call__(self) -> Telemetry:
        with self._lock:
            if self._process is not None and not self._process.is_alive():
                self._retire("exited", f" (exit code {self._process.exitcode})")
            if self._process is None:
                wait = self._next_spawn_at - self._monotonic()
                if wait > 0:
                    raise TelemetryError(f"the telemetry reader is being replaced; next try in {wait:.0f}s")
                self._spawn()
                self.restarts += 1
            try:
                self._parent.send("read")
                if not self._parent.poll(self._timeout + self._grace):
                    self._retire("hung", f" (no answer within {self._timeout + self._grace:g}s)")
                    raise TelemetryError("the telemetry reader did not answer in time; it was replaced")
                status, payload = self._parent.recv()
            except (EOFError, OSError):
                self._retire("exited", " during a read")
                raise TelemetryError("the telemetry reader exited during a read; it was replaced") from None
            # Any answer, a Prometheus error included, shows a working reader.
            self._failures, self._failing_since, self._grace = 0, None, 0.0
        if status == "ok":
            return payload
        raise TelemetryError(payload)

    def failing_seconds(self) -> float:
        """Seconds since the reader last stopped answering (0 while it answers)."""
        since = self._failing_since
        return 0.0 if since is None else self._monotonic() - since

    def close(self) -> None:
        with self._lock:
            if self._process is None:
                return
            try:
                self._parent.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
            self._parent.close()
