"""The TPOT signal: a serving replica whose time per output token runs well over its peers' — the
same model, the same GPU model, a like batch and KV cache fill — marks the GPUs it holds degraded.
Pure, no I/O.

At a given batch and KV fill a decode step's time is the GPU's: weights and KV read from memory,
the same work on every replica of the model. So a replica 25 % slower than its peers so placed
points at its GPU, whatever its clocks say (a slow HBM stack, a PCIe or NVLink link trained down,
a clock the clock signal cannot judge because the GPU is capped): `slowerThanPeers` 1.25 is three
times the mean spread of one model's GPUs (8 %) and under both their outliers (1.5×) and a hardware
slowdown (2× or more) — Sinha et al., "Not All GPUs Are Created Equal", SC22 (arXiv 2208.11035);
the clock signal's 0.8 of its peers is the same bar (1 / 0.8). Peers are alike when their running
batch is within `batchFactor` of its and their KV cache use within `kvFillSpread`: a decode step's
time grows with both, so the bands are kept narrow enough that batch alone cannot reach the bar.
A replica slowed by its host's CPUs reads slow too, so where the host-CPU signal reads its node's
GPU pods throttled or its tasks waiting for a CPU (its warm bar, a tenth of the time) this signal
marks nothing there.

Reads the model servers' own series, as a PodMonitor labels them (`namespace`, `pod`), over
`windowSeconds`: the TPOT histogram's mean (vLLM v1's `vllm:inter_token_latency_seconds`, v0's
`vllm:time_per_output_token_seconds`, SGLang's `sglang:inter_token_latency_seconds`), the running
batch and the KV cache's use; and which GPUs each pod holds from dcgm-exporter's pod mapping.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scoring import dcgm
from scoring.ingest.rows import Series, selector
from scoring.ingest.signals import host_cpu
from scoring.ingest.signals.base import BY_UNIT, NodeOf, Rows
from scoring.ingest.telemetry import GpuSample, NodeTelemetry, unit_id
from scoring.plugins import Registration
from scoring.policy import HeatPolicy
from scoring.tiers import Tier, Verdict

NAME = "tpot"
RATIO = "tpot_over_peers"
"""Reading name, followed by ":<unit>": the holding replica's TPOT over its peers' median."""
TPOT, LOAD, HELD = "tpot_seconds", "tpot_load", "tpot_held"
"""Its row sets: each replica's mean TPOT, its batch and KV fill, and the GPUs each pod holds."""


@dataclass(frozen=True)
class Args:
    slower_than_peers: float = 1.25
    """A replica this many times its peers' median TPOT marks its GPUs degraded (module docstring)."""
    batch_factor: float = 1.15
    """Peers run a batch within this factor of the replica's. TPOT grows with the batch: the
    simulator's replica model (fitted to published vLLM measurements; `gpu-balancer serving-curve
    --gpu H100-80GB --model Llama-3.1-8B`) has it 1.28× from 32 to 48 running and about
    batch^0.8 past 64. So within 1.5× a healthy replica read 1.25× its peers from batch alone, and
    the serving world's bursts marked 19 nodes with no slow GPU (BENCHMARKS, "TPOT against peers,
    in the simulator"). Within 1.15×, batch alone gives at most 1.12×, and 1.21× with the GPUs'
    8 % spread, under the bar."""
    kv_fill_spread: float = 0.2
    """Peers' KV cache use is within this much of the replica's (a share, 0–1): assumption."""
    min_peers: int = 2
    """Peers it takes to judge: the median of one other is that one replica's figure."""
    window_seconds: int = 300
    """The TPOT mean's and the load's window: five minutes of decoding."""
    histograms: tuple[str, ...] = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
                                   "sglang:inter_token_latency_seconds")
    running: tuple[str, ...] = ("vllm:num_requests_running", "sglang:num_running_reqs")
    kv_usage: tuple[str, ...] = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
    """The servers' series, any of each list (a server exporting two of one list counts once)."""

    def validate(self) -> list[str]:
        problems = []
        if self.slower_than_peers <= 1:
            problems.append(f"slowerThanPeers: must be over 1, got {self.slower_than_peers}")
        if self.batch_factor < 1 or not 0 <= self.kv_fill_spread <= 1:
            problems.append(f"batchFactor: must be 1 or more and kvFillSpread in [0, 1], got {self.batch_factor}, "
                            f"{self.kv_fill_spread}")
        if self.min_peers < 1 or self.window_seconds < 30:
            problems.append(f"minPeers: must be 1 or more and windowSeconds 30 or more, got {self.min_peers}, "
                            f"{self.window_seconds}")
        if not (self.histograms and self.running):
            problems.append("histograms: a TPOT histogram and a running-batch gauge must be named")
        return problems


@dataclass(frozen=True, slots=True)
class _Replica:
    namespace: str
    pod: str
    model: str
    tpot: float
    running: float
    kv: float | None


HOST_BAR = host_cpu.Args().warm_share
"""A node whose GPU pods are CPU-throttled, or whose tasks wait for a CPU, this share of the time
or more: its replicas' TPOT says nothing of its GPUs (the host-CPU signal's warm bar)."""


def slow_gpus(node: NodeTelemetry) -> list[tuple[str, float]]:
    """(unit, its replica's TPOT over its peers') for each GPU this signal marks degraded, in unit
    order; none on a node whose host CPUs explain a slow replica. A replica held at its own CPU
    limit runs slow on any node: marking its GPU would move it, and its replacement, for ever."""
    if any((node.reading(name) or 0.0) >= HOST_BAR for name in (host_cpu.THROTTLED, host_cpu.WAITING)):
        return []
    return node.readings_per(RATIO)


def _names(names: Sequence[str]) -> str:
    return "|".join(names)


class Tpot:
    name = NAME
    exporters = ("vLLM", "SGLang")
    """With dcgm-exporter's pod mapping beside them: held against their own text
    (`tests/scoring/test_tpot.py`), not against GPU samples."""

    def __init__(self, args: Args = Args()) -> None:
        self.args = args

    def queries(self, matchers: str) -> dict[str, str]:
        window = f"[{self.args.window_seconds}s]"
        by_pod = "namespace, pod, model_name"
        sums = "|".join(f"{h}_sum" for h in self.args.histograms)
        counts = "|".join(f"{h}_count" for h in self.args.histograms)
        # dcgm-exporter names a GPU's pod under exported_* where Prometheus kept the scrape's own
        # pod label, else bare (as the host-CPU signal reads it).
        held = f'{dcgm.GPU_UTIL}{{{matchers + ", " if matchers else ""}exported_pod!=""}}'
        for label in ("pod", "namespace"):
            held = f'label_replace({held}, "{label}", "$1", "exported_{label}", "(.+)")'
        bare = selector(dcgm.GPU_UTIL, f'{matchers + ", " if matchers else ""}exported_pod="", pod!=""')
        return {
            TPOT: (f'sum by ({by_pod}) (rate({{__name__=~"{sums}"}}{window})) / '
                   f'(sum by ({by_pod}) (rate({{__name__=~"{counts}"}}{window})) > 0)'),
            LOAD: (f'label_replace(max by (namespace, pod) (avg_over_time({{__name__=~"{_names(self.args.running)}"}}'
                   f'{window})), "figure", "running", "", "") or label_replace(max by (namespace, pod) '
                   f'(avg_over_time({{__name__=~"{_names(self.args.kv_usage)}"}}{window})), "figure", "kv", "", "")'),
            # Only the GPUs of pods that report a TPOT: a row per serving GPU, none for the rest.
            HELD: (f"max by ({BY_UNIT}, modelName, namespace, pod) ({held} or {bare}) and on (namespace, pod) "
                   f'group by (namespace, pod) ({{__name__=~"{counts}"}})'),
        }

    def aggregate(self, samples: Sequence[GpuSample]) -> dict[str, list[Series]]:
        """Nothing: GPU samples carry no serving figures (the simulator answers its rows beside
        them, `sim.policies.gpu_balancer.tpot_rows`)."""
        return {}

    def read(self, rows: Rows, node_of: NodeOf) -> dict[str, dict[str, Any]]:
        load: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        for row in rows.get(LOAD, ()):
            load[row.labels.get("namespace", ""), row.labels.get("pod", "")][row.labels.get("figure", "")] = row.value
        held: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
        for row in rows.get(HELD, ()):
            if node := node_of(row):
                unit = unit_id(row.labels.get("gpu", "?"), row.labels.get("GPU_I_ID", ""))
                held[row.labels.get("namespace", ""), row.labels.get("pod", "")].append(
                    (node, unit, row.labels.get("modelName", "")))
        groups: dict[tuple[str, str], list[_Replica]] = defaultdict(list)
        for row in rows.get(TPOT, ()):
            key = (row.labels.get("namespace", ""), row.labels.get("pod", ""))
            figures = load.get(key, {})
            if key in held and "running" in figures and math.isfinite(row.value) and row.value > 0:
                gpu_model = held[key][0][2]
                groups[row.labels.get("model_name", ""), gpu_model].append(
                    _Replica(*key, row.labels.get("model_name", ""), row.value, figures["running"], figures.get("kv")))
        readings: dict[str, dict[str, float]] = {}
        for replicas in groups.values():
            for replica, ratio in self._slow(replicas):
                for node, unit, _ in held[replica.namespace, replica.pod]:
                    readings.setdefault(node, {})[f"{RATIO}:{unit}"] = ratio
        return {node: {"readings": found} for node, found in readings.items()}

    def _slow(self, replicas: list[_Replica]) -> list[tuple[_Replica, float]]:
        """The replicas at or over `slowerThanPeers` times their like peers' median TPOT."""
        found = []
        for replica in replicas:
            peers = [p.tpot for p in replicas if p is not replica and self._alike(replica, p)]
            if len(peers) >= self.args.min_peers and (ratio := replica.tpot / statistics.median(peers)) >= \
                    self.args.slower_than_peers:
                found.append((replica, ratio))
        return found

    def _alike(self, one: _Replica, other: _Replica) -> bool:
        low, high = sorted((max(one.running, 1e-9), max(other.running, 1e-9)))
        kv_alike = one.kv is None or other.kv is None or abs(one.kv - other.kv) <= self.args.kv_fill_spread
        return high / low <= self.args.batch_factor and kv_alike

    def verdicts(self, node: NodeTelemetry, policy: HeatPolicy) -> list[Verdict]:
        slow = slow_gpus(node)
        if not slow:
            return []
        tier = Tier.HOT if 2 * len(slow) >= max(1, node.gpus) else Tier.WARM
        return [(tier, f"GPU {unit} degraded: its replica's TPOT {ratio:.2f}× its peers' (same model and GPU, "
                       f"like batch)") for unit, ratio in slow]

    def explain(self, reasons: Sequence[str]) -> str | None:
        """e.g. "degraded: GPU 3" (said once, by the degraded signal, where both found it)."""
        return None


REGISTRATION = Registration(NAME, Args, Tpot)
