"""The host-CPU signal: a model server's engine loop needs its cores on time, and a node whose CPUs
are contended serves slower whatever its GPUs' duty cycle says; a GPU pod's container held at its
own CPU quota is slow on any node, so it is said, not held against the node. Pure, no I/O.

Two readings, each from the series a real exporter publishes, over `rateWindowSeconds`:
- **waiting**: the share of time some task on the node waited for a CPU, node_exporter's pressure
  stall information (`node_pressure_cpu_waiting_seconds_total`, the kernel's PSI "some" line);
- **throttled**: the worst share of CFS periods in which a container of a GPU pod was throttled
  at its CPU limit, from the kubelet's cAdvisor (`container_cpu_cfs_throttled_periods_total` over
  `container_cpu_cfs_periods_total`); a container holding GPUs is one dcgm-exporter names.

Why it matters (README, "Host pressure"): vLLM issue #49460 measured a replica limited to 6 CPUs
throttled nearly all the time, its inter-token latency going from 7–9 ms to 68–93 ms while its GPU
was 7–12 % busy. The bars: throttled in a quarter of the periods is the kubernetes-mixin's
`CPUThrottlingHigh` alert (said on the node, which stays cool for it: `verdicts`); the same
quarter of time waiting, and a tenth for warm, are assumptions. node_exporter and the kubelet
label series by node differently from dcgm-exporter, so
the queries copy the node's name from `nodeLabel` into `node` (dropping a `:port`), and leave the
policy's DCGM series matchers out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series
from scoring.ingest.signals.base import NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry
from scoring.plugins import Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict

NAME = "host_cpu"
WAITING, THROTTLED = f"{NAME}_waiting", f"{NAME}_throttled"
"""Its row sets, and the readings it keeps on the node by the same names (`NodeTelemetry.reading`),
each a share of time, 0–1."""
PREFIX = "host CPU"
"""The reason prefix of its verdicts."""
CONTENDED = f"{PREFIX}: tasks waiting for a CPU"
"""How a verdict on the node's own contention begins: the one reason a pod steered away hears of."""


@dataclass(frozen=True)
class Args:
    warm_share: float = 0.10
    hot_share: float = 0.25
    """Waiting or throttled this share of the time makes the node warm, or hot."""
    rate_window_seconds: int = 120
    """The rates' window: four scrapes at the usual 30 s."""
    node_label: str = "node"
    """The label holding the node's name on node_exporter's and the kubelet's series (kube-prometheus
    relabels node_exporter's `instance` to it; `instance` works too, its port is dropped)."""
    selector: str = ""
    """Matchers for those series, e.g. `cluster="prod"` where one Prometheus holds several clusters
    (the policy's `prometheus.seriesSelector` is for dcgm-exporter's series and is not applied)."""

    def validate(self) -> list[str]:
        problems = []
        if not 0 < self.warm_share < self.hot_share <= 1:
            problems.append(f"warmShare: must satisfy 0 < warmShare < hotShare <= 1, got {self.warm_share}, "
                            f"{self.hot_share}")
        if self.rate_window_seconds < 30:
            problems.append(f"rateWindowSeconds: must be at least 30 (two scrapes for a rate), got "
                            f"{self.rate_window_seconds}")
        if not self.node_label.isidentifier():
            problems.append(f"nodeLabel: not a Prometheus label name: {self.node_label!r}")
        return problems


class HostCpu:
    name = NAME
    exporters = ("node_exporter", "kubelet cAdvisor")

    def __init__(self, args: Args = Args()) -> None:
        self.args = args

    def _by_node(self, expr: str) -> str:
        """`expr` with the node's name in `node`, one row per node: the worst."""
        named = f'label_replace({expr}, "node", "$1", "{self.args.node_label}", "([^:]+)(:[0-9]+)?")'
        return f"max by (node) ({named})"

    def queries(self, matchers: str) -> dict[str, str]:
        window = f"[{self.args.rate_window_seconds}s]"
        extra = f", {self.args.selector}" if self.args.selector else ""
        containers = f'container!="", container!="POD"{extra}'
        throttled = (f"sum by (namespace, pod, container, {self.args.node_label}) "
                     f"(rate(container_cpu_cfs_throttled_periods_total{{{containers}}}{window}))")
        periods = (f"sum by (namespace, pod, container, {self.args.node_label}) "
                   f"(rate(container_cpu_cfs_periods_total{{{containers}}}{window}))")
        # The containers dcgm-exporter names on a GPU: its pod mapping is under exported_* where
        # Prometheus kept the scrape's own pod label, else bare.
        gpu_series = f'{{__name__=~"{dcgm.FB_USED}|{dcgm.GPU_UTIL}"'
        exported = f'{gpu_series}, exported_pod!=""}}'
        for label in ("pod", "namespace", "container"):
            exported = f'label_replace({exported}, "{label}", "$1", "exported_{label}", "(.+)")'
        gpu_containers = (f"group by (namespace, pod, container) ({exported} or "
                          f'{gpu_series}, exported_pod="", pod!=""}})')
        return {
            WAITING: self._by_node(f"rate(node_pressure_cpu_waiting_seconds_total{{{self.args.selector}}}{window})"),
            THROTTLED: self._by_node(f"(({throttled}) / ({periods} > 0)) and on (namespace, pod, container) "
                                     f"{gpu_containers}"),
        }

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        """Nothing: GPU samples carry no host figures (the simulator answers its rows beside them,
        `sim.policies.gpu_balancer.host_rows`)."""
        return {}

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for reading in (WAITING, THROTTLED):
            for row in rows.get(reading, ()):
                if node := row.labels.get("node", ""):  # its own queries name the node so
                    found.setdefault(node, {}).setdefault("readings", {})[reading] = row.value
        return found

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        """Waiting heats the node. Throttling is said but leaves the node cool: a container held at
        its own CPU limit runs as slowly on any node (CFS is work-conserving, so it takes nothing
        from its neighbours), and a node marked hot for it only pushes new pods onto the nodes
        whose CPUs are contended (BENCHMARKS, "Host CPU: throttling is the pod's, not the node's")."""
        verdicts = []
        for reading, what, after in ((WAITING, CONTENDED, ""), (THROTTLED, f"{PREFIX}: a GPU pod's CPU throttled",
                                     " at its own limit (raise the limit; moving it does not help)")):
            share = node.reading(reading)
            if share is None or share < self.args.warm_share:
                continue
            tier, bar = (Tier.HOT, self.args.hot_share) if share >= self.args.hot_share else (
                Tier.WARM, self.args.warm_share)
            verdicts.append((tier if reading == WAITING else Tier.COOL,
                             f"{what} {share:.0%} of the time ≥ {bar:.0%}{after}"))
        return verdicts

    def explain(self, reasons: Sequence[str]) -> str | None:
        """e.g. "host CPU contended" (a throttled pod's own limit is not the node's contention)."""
        return f"{PREFIX} contended" if any(reason.startswith(CONTENDED) for reason in reasons) else None


REGISTRATION = Registration(NAME, Args, HostCpu)
