"""What a node signal is: a figure the exporters report per GPU, read per node into the snapshot
and judged into the node's heat. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from scoring import dcgm
from scoring.ingest.rows import Series
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.policy import HeatPolicy
from scoring.tiers import Verdict

BY_NODE = ", ".join(dcgm.NODE_LABEL_CANDIDATES)
"""Every label a node's name may be under: group by all of them, the reader picks one."""
BY_UNIT = f"{BY_NODE}, gpu, GPU_I_ID"
"""A GPU or MIG instance."""

Rows = Mapping[str, Sequence[Series]]
NodeOf = Callable[[Series], str]


class NodeSignal(Protocol):
    """One signal, end to end. Its queries must answer a few rows per node (or per unit with a
    problem), so the recording rules record them as they are (`scoring.ingest.recording`)."""

    name: str
    exporters: tuple[str, ...]
    """Whose series it reads. A signal of dcgm-exporter's series reads GPU samples the same way
    (`aggregate`); one of other exporters' has no GPU samples to aggregate."""

    def queries(self, matchers: str) -> dict[str, str]:
        """Instant PromQL by row-set name; `matchers` is the policy's series selector."""
        ...

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        """The rows those queries would answer for these GPUs (node label `node`): how the
        simulator and the exposition-text reader, which have no Prometheus, read it."""
        ...

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        """Node → the `NodeTelemetry` fields this signal fills."""
        ...

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        """What it makes of the node: a tier and a reason for each step above cool."""
        ...

    def explain(self, reasons: Sequence[str]) -> str | None:
        """What a pod steered away from the node is told, from the node's reasons; None where
        the tier says enough."""
        ...
