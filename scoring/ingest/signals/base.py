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


def remembered(expression: str, seconds: int) -> str:
    """`expression`'s rows now, and those it had over the last `seconds` but not now at the highest
    each reached, for a raw read: a subquery at a twelfth of the span (30 s at least), so its
    cost is a dozen evaluations more. Subquery steps fall on multiples of the step, so a row that
    lasted less than one may be missed. Through the recording rules the reader asks
    `max_over_time` of the record instead (`scoring.ingest.recording.recorded_query`)."""
    return f"({expression}) or {highest_over(expression, seconds)}"


def highest_over(expression: str, seconds: int) -> str:
    """`remembered`'s subquery: each row's highest over the span, at the steps it falls on."""
    return f"max_over_time(({expression})[{seconds}s:{max(30, seconds // 12)}s])"


class NodeSignal(Protocol):
    """One signal, end to end. Its queries must answer a few rows per node (or per unit with a
    problem), so the recording rules record them as they are (`scoring.ingest.recording`)."""

    name: str
    exporters: tuple[str, ...]
    """Whose series it reads. A signal of dcgm-exporter's series reads GPU samples the same way
    (`aggregate`); one of other exporters' has no GPU samples to aggregate."""

    memory: Mapping[str, int]
    """Optional: row sets read as the highest each row reached over the last so many seconds, not
    as now (`remembered`), for a condition that comes and goes, or hides while a GPU idles. A
    signal without it reads every row set as now."""

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
