"""Read telemetry in a child process, so decoding Prometheus' answers never holds the webhook's GIL.

Does I/O: a `spawn`ed process runs `scoring.prometheus.read_snapshot` on request and sends the
frozen `ClusterSnapshot` back through a pipe. At 5,000 nodes a read costs ~0.9 s of CPU; in the
webhook process that would stall admissions, in the child it costs the parent one unpickle.
"""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.connection import Connection

from scoring.policy import BalancerPolicy
from scoring.prometheus import TelemetryError
from scoring.telemetry import ClusterSnapshot


def _serve(policy: BalancerPolicy, connection: Connection) -> None:
    from scoring.prometheus import connect, read_snapshot

    query = connect(policy.prometheus)
    while True:
        try:
            if connection.recv() is None:
                return
        except (EOFError, OSError):
            return
        try:
            connection.send(("ok", read_snapshot(query, policy)))
        except TelemetryError as error:
            connection.send(("telemetry-error", str(error)))
        except Exception as error:  # noqa: BLE001 - report, never die: the parent keeps its old snapshot
            connection.send(("error", f"{type(error).__name__}: {error}"))


class ChildProcessReader:
    """A `read()` for `SnapshotCache` that runs in a child process; `close()` ends the child."""

    def __init__(self, policy: BalancerPolicy) -> None:
        context = multiprocessing.get_context("spawn")
        self._parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(policy, child), name="telemetry-reader", daemon=True)
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._timeout = policy.prometheus.timeout_seconds * 2 + 30

    def __call__(self) -> ClusterSnapshot:
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
