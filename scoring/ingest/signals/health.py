"""The health signal: the last XID each GPU reported; one of `heat.criticalXids` (double-bit
ECC, fallen off the bus…) makes its node unhealthy. Pure, no I/O.

dcgm-exporter reports the code of the last XID, not a count, and Prometheus returns only the
non-zero ones: a missing series cannot be told from a healthy GPU, so health is not among the
signals whose absence makes a verdict partial."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series, selector
from scoring.ingest.signals.base import BY_UNIT, NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry, natural_key, unit_id
from scoring.plugins import NoArgs, Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict


def failed_gpus(node: NodeTelemetry, policy: HeatPolicy) -> tuple[tuple[str, int], ...]:
    """(unit, XID) for each of the node's units whose last XID is critical: it needs a reset."""
    return tuple((gpu, xid) for gpu, xid in node.xids if xid in policy.critical_xids)


class Health:
    name = "health"
    exporters = ("dcgm-exporter",)

    def queries(self, matchers: str) -> dict[str, str]:
        # Filter before grouping: only GPUs with an XID are hashed into groups.
        return {"xids": f"max by ({BY_UNIT}) ({selector(dcgm.XID_ERRORS, matchers)} > 0)"}

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        return {"xids": [Series({"node": s.node, "gpu": s.gpu, "GPU_I_ID": s.mig_instance}, s.last_xid)
                         for s in samples if s.last_xid]}

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        xids: dict[str, list[tuple[str, int]]] = {}
        for row in rows.get("xids", ()):
            if (node := node_of(row)) and row.value > 0:
                unit = unit_id(row.labels.get("gpu", "?"), row.labels.get("GPU_I_ID", ""))
                xids.setdefault(node, []).append((unit, int(row.value)))
        return {node: {"xids": tuple(sorted(found, key=lambda x: natural_key(x[0])))} for node, found in xids.items()}

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        return [(Tier.UNHEALTHY, f"GPU {gpu} reported critical XID {xid}") for gpu, xid in failed_gpus(node, policy)]

    def explain(self, reasons: Sequence[str]) -> str | None:
        return None


REGISTRATION = Registration("health", NoArgs, lambda args: Health())
