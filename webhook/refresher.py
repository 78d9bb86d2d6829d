"""Read and assess telemetry in a child process, so that work never holds the webhook's GIL.

Does I/O: a `spawn`ed process runs `scoring.prometheus.SnapshotReader` and `webhook.cache.assess`
on request and sends the small `Telemetry` (the ranked fleet, no per-GPU data) back through a
pipe. At 5,000 nodes the read costs ~0.9 s of CPU and the assessment ~90 ms; in the webhook
process both would stall admissions, from the child they cost the parent one short unpickle.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from multiprocessing.connection import Connection

from scoring.policy import BalancerPolicy
from scoring.prometheus import TelemetryError
from scoring.telemetry import ClusterSnapshot
from webhook.cache import Telemetry, assess

CHILD_NICENESS = 10


def _serve(policy: BalancerPolicy, connection: Connection, read: Callable[[], ClusterSnapshot] | None) -> None:
    # Lower priority than the admissions it feeds: on a busy node the scheduler then runs the
    # webhook's request path first and this refresh in the gaps (a few seconds late is harmless).
    os.nice(CHILD_NICENESS)
    if read is None:
        from scoring.prometheus import SnapshotReader, connect

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


class ChildProcessReader:
    """A `read()` for `SnapshotCache` that runs in a child process; `close()` ends the child.

    The child reads Prometheus as `policy` says, unless `read` (a picklable callable returning a
    `ClusterSnapshot`, run in the child) is given instead: the benchmark's synthetic fleet."""

    def __init__(self, policy: BalancerPolicy, *, read: Callable[[], ClusterSnapshot] | None = None) -> None:
        context = multiprocessing.get_context("spawn")
        self._parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(policy, child, read), name="telemetry-reader",
                                        daemon=True)
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._timeout = policy.prometheus.timeout_seconds * 2 + 30

    def __call__(self) -> Telemetry:
        with self._lock:
            if not self._process.is_alive():
                raise TelemetryError("the telemetry reader process has exited")
            self._parent.send("read")
            if not self._parent.poll(self._timeout):
                raise TelemetryError("the telemetry reader process did not answer in time")
            status, payload = self._parent.recv()
        if status == "ok":
            return payload
        raise TelemetryError(payload)

    def close(self) -> None:
        try:
            self._parent.send(None)
        except (OSError, BrokenPipeError):
            pass
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
        self._parent.close()
