"""The PromQL gpu-balancer asks Prometheus: what a snapshot, its recording rules and the
descheduler's windows are made of. Builders only: pure, no I/O (`scoring.ingest.prometheus` sends them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scoring import dcgm
from scoring.ingest.rows import selector
from scoring.ingest.series import EXPORTER_HINTS, ksm_label_name
from scoring.ingest.signals import registry as signals
from scoring.ingest.signals.base import BY_NODE as _NODE, BY_UNIT
from scoring.policy import BalancerPolicy, HeatPolicy

_WORKLOAD = ("exported_pod, exported_namespace, exported_container, pod, namespace, container, job, service, "
             "dra_claim_name")
"""The pod labels, the target labels that tell the exporter's own pod from a workload, and the
label dcgm-exporter adds where the pod's GPU came from a DRA claim."""


def utilisation_selector(matchers: str, *extra: str) -> str:
    """Both utilisation gauges: every unit reports at least one (`dcgm.UTILISATION_METRICS`)."""
    return selector("", matchers, f'__name__=~"{"|".join(dcgm.UTILISATION_METRICS)}"', *extra)


def snapshot_queries(matchers: str, *, lookback_seconds: float, busy: dcgm.BusyMeasure,
                     topology_keys: Sequence[str] = (), heat: HeatPolicy = HeatPolicy()) -> dict[str, str]:
    """Every instant query a snapshot needs, by the row-set name `scoring.ingest.series` reads.

    Each DCGM gauge is scanned once: Prometheus aggregates per node where the figure is a sum or a
    maximum, and returns one short row per unit only for utilisation, which the builder needs per
    node and per pod and from which it counts the units. The busy gauges (`busy.readings`) are
    fetched apart, the preferred one whole and each other only where a unit lacks those before it,
    because a PromQL `or` join over 40,000 GPUs costs more than the fetches together.
    Memory is known on a node only where as many GPUs report FB_FREE as FB_USED (`fb_counts`): a
    missing FB_FREE is unknown, not 0. Sums and counts take each GPU once, however many series
    name it. (Summing only the GPUs with both, by a vector match, costs
    Prometheus two joins over every GPU.)
    """
    per_unit = f"{_NODE}, gpu, GPU_I_ID, GPU_I_PROFILE, modelName, {_WORKLOAD}"
    unit = BY_UNIT
    per_gpu = f"max by (__name__, {unit})"
    summed = f'__name__=~"{dcgm.FB_USED}|{dcgm.FB_FREE}|{dcgm.POWER_USAGE}"'
    framebuffer = f'__name__=~"{dcgm.FB_USED}|{dcgm.FB_FREE}"'
    gpu_resource = 'resource="nvidia_com_gpu"'
    requests_ = selector("kube_pod_container_resource_requests", matchers, gpu_resource, 'node!=""')
    phase = selector("kube_pod_status_phase", matchers, 'phase=~"Pending|Running"')
    allocatable = selector("kube_node_status_allocatable", matchers, gpu_resource)
    gpu_requests = selector("kube_pod_container_resource_requests", matchers, 'resource=~"nvidia_com_.+"')
    gauges = {name: selector(metric, matchers) for name, metric, _ in busy.readings}
    recently = [f"count by ({unit}) (last_over_time({selector(metric, matchers)}[{int(lookback_seconds)}s]))"
                for metric in (dcgm.GR_ENGINE_ACTIVE, dcgm.GPU_UTIL)]
    gpu_zero = 'gpu="0"'
    newest = [f"timestamp({selector(metric, matchers, gpu_zero)})" for metric in dcgm.UTILISATION_METRICS]
    names = list(gauges)
    queries = {
        names[0]: f"max by ({per_unit}) ({gauges[names[0]]})",
        **{name: f"max by ({per_unit}) ({gauges[name]} unless on ({unit}) {_union(map(gauges.get, names[:i]))})"
           for i, name in enumerate(names[1:], 1)},
        # One value per GPU first: where pods share a DRA claim, dcgm-exporter writes a GPU's
        # series once per pod (and a target scraped twice writes each twice).
        "sums": f"sum by (__name__, {_NODE}) ({per_gpu} ({selector('', matchers, summed)}))",
        "fb_counts": f"count by (__name__, {_NODE}) ({per_gpu} ({selector('', matchers, framebuffer)}))",
        **placeable_memory_queries(matchers),
        **signals.queries(matchers, heat),  # temperature, throttling, XIDs, host CPU: a few rows per node
        # Functions drop the metric name, so each gauge is reduced on its own before the union.
        "seen_recently": f"count by ({_NODE}) ({' or '.join(recently)})",
        # Every GPU node has a GPU 0: its samples date the fleet at an eighth of the cost of all GPUs.
        "newest_sample": f"max({' or '.join(newest)})",
        "ksm_allocated": (f"sum by (node) ({requests_} * on (namespace, pod) group_left () "
                          f"max by (namespace, pod) ({phase}))"),
        "ksm_allocatable": f"max by (node) ({allocatable})",
        "ksm_gpu_pods": f"max by (namespace, pod) ({gpu_requests} > 0)",
    }
    if topology_keys:
        labels = ", ".join(ksm_label_name(key) for key in topology_keys)
        queries["node_labels"] = f"max by (node, {labels}) ({selector('kube_node_labels', matchers)})"
    return queries


RECORDED_INSTEAD = ("gpu_busy", "gpu_engine_active", "gpu_util", "fb_counts")
"""The raw queries whose answers have a row per unit or per node and gauge: the recording rules
replace them by per-node records (`replacement_records`), which is what makes a recorded
refresh cheap."""

REPLACEMENT_ROWS = ("node_units", "node_util_sum", "node_util_max", "mig_parents", "pod_units", "fb_unknown")
"""The replacement records the reader fetches (the others are steps between)."""


def replacement_records(matchers: str, *, busy: dcgm.BusyMeasure, recorded: Callable[..., str]) -> dict[str, str]:
    """The recording rules that stand in for `RECORDED_INSTEAD`, in evaluation order: a later rule
    reads an earlier one's series through `recorded(name, *matchers)` (its selector, fingerprint
    included).

    `unit_copies` is one row per unit and pod copy, utilisation 0–100 from the preferred gauge
    (the next only where a unit lacks those before it), as the raw rows give it; `units` takes each unit once
    and leaves out a MIG-enabled GPU's own row. From those: per node and GPU kind the unit count,
    per node the utilisation's sum and maximum, and per node the MIG parents (which still count
    as reporting, for vanished GPUs). Only units whose series name a pod come per unit
    (`pod_units`), because which pod is a workload is decided from labels in Python
    (`scoring.ingest.series.classify_workloads`): a bare `pod` only where no series has `exported_pod`,
    and never the exporter's own by name (the rest of that test needs two labels compared).
    `fb_unknown` names only the nodes where some GPU reports one framebuffer gauge without the
    other (their memory is unknown), in place of both counts for every node.
    """
    per_unit = f"{_NODE}, gpu, GPU_I_ID, GPU_I_PROFILE, modelName, {_WORKLOAD}"
    unit = BY_UNIT
    copies = recorded("unit_copies")
    # A MIG-enabled GPU: grouped without GPU_I_ID, it matches exactly its own row's key (GPU_I_ID
    # empty) `on (unit)`, and selecting instance rows is cheap where there are none.
    parent_rows, instance_rows = recorded("unit_copies", 'GPU_I_ID=""'), recorded("unit_copies", 'GPU_I_ID!=""')
    partitioned = f"max by ({_NODE}, gpu) ({instance_rows})"
    hints = "|".join(EXPORTER_HINTS)
    bare_pods = recorded("unit_copies", 'pod!=""', f'pod!~".*({hints}).*"', f'container!~".*({hints}).*"')
    exported = recorded("unit_copies", 'exported_pod!=""')
    units = recorded("units")
    framebuffer = selector("", matchers, f'__name__=~"{dcgm.FB_USED}|{dcgm.FB_FREE}"')
    return {
        # `or on (unit)` adds a later gauge's rows only for units without the earlier ones.
        "unit_copies": f"clamp({f' or on ({unit}) '.join(f'max by ({per_unit}) ({g})' for g in _scaled(busy, matchers))}"
                       ", 0, 100)",
        "units": f"max by ({unit}, GPU_I_PROFILE, modelName) ({copies}) unless on ({unit}) {partitioned}",
        "node_units": f"count by ({_NODE}, GPU_I_PROFILE, modelName) ({units})",
        "node_util_sum": f"sum by ({_NODE}) ({units})",
        "node_util_max": f"max by ({_NODE}) ({units})",
        "mig_parents": f"count by ({_NODE}) (max by ({unit}) ({parent_rows}) and on ({unit}) {partitioned})",
        # Without the GPU kind, which `node_units` gives: a tenth less to serve and decode.
        "pod_units": (f"max by ({unit}, {_WORKLOAD}) (({exported} or ({bare_pods} unless on () count({exported})))"
                      f" unless on ({unit}) {partitioned})"),
        "fb_unknown": f"count by ({_NODE}) (count by ({unit}) (max by (__name__, {unit}) ({framebuffer})) == 1)",
    }


def placeable_memory_queries(matchers: str) -> dict[str, str]:
    """FB_USED and FB_FREE summed per node over the GPUs a new pod could take or share
    (`scoring.ingest.memory`): every GPU but those whose series name exactly one workload pod — an
    `exported_pod`, or a bare `pod` that is not the exporter's own where no series has
    `exported_pod` (the rule `pod_units` records). A few rows per node, so the recording rules
    record it as it is."""
    hints = "|".join(EXPORTER_HINTS)
    unit = BY_UNIT
    named = "exported_pod, exported_namespace, pod, namespace"
    exported = selector(dcgm.FB_USED, matchers, 'exported_pod!=""')
    bare = selector(dcgm.FB_USED, matchers, 'pod!=""', f'pod!~".*({hints}).*"', f'container!~".*({hints}).*"')
    held_alone = (f"count by ({unit}) (max by ({unit}, {named}) ({exported} or ({bare} unless on () "
                  f"count({exported})))) == 1")
    return {f"fb_placeable_{part}": f"sum by ({_NODE}) (max by ({unit}) ({selector(metric, matchers)}) "
                                    f"unless on ({unit}) ({held_alone}))"
            for part, metric in (("used", dcgm.FB_USED), ("free", dcgm.FB_FREE))}


def topology_keys(policy: BalancerPolicy) -> tuple[str, ...]:
    """The packing domains, tightest first: NVLink clique, network block, zone."""
    return policy.placement.packing_domains


def _union(selectors) -> str:
    """Selectors of different metrics as one vector (a bare one stays bare, as before there were more)."""
    found = list(selectors)
    return found[0] if len(found) == 1 else f"({' or '.join(found)})"


def _scaled(busy: dcgm.BusyMeasure, matchers: str) -> list[str]:
    """Each of `busy.readings` as a 0–100 expression, the preferred first."""
    return [selector(metric, matchers) if factor == 1 else f"{factor:g} * {selector(metric, matchers)}"
            for _, metric, factor in busy.readings]


def per_node_util(matchers: str, busy: dcgm.BusyMeasure) -> str:
    """Mean GPU utilisation per node, 0–100: what the descheduler's window is made of. As the
    snapshot reads a unit: its preferred gauge, else the next it reports (GPU_UTIL alone where no
    profiling gauge is preferred)."""
    first, *rest = _scaled(busy, matchers)
    either = f" or on ({BY_UNIT}) "
    util = first if busy.gauge is None else f"(({first}){either}{either.join(rest)})"
    return f"avg by ({_NODE}) (clamp({util}, 0, 100))"


def window_queries(matchers: str, *, window_seconds: float, step_seconds: float, quantile: float,
                   busy: dcgm.BusyMeasure, recorded: str | None = None) -> dict[str, str]:
    """Per-node utilisation over the window: subqueries over the per-node mean, or, with
    recording rules, the recorded per-node series itself (`recorded`, its selector)."""
    if recorded:
        series = f"{recorded}[{int(window_seconds)}s]"
    else:
        series = f"({per_node_util(matchers, busy)})[{int(window_seconds)}s:{int(step_seconds)}s]"
    return _over_time(series, quantile)


def _over_time(series: str, quantile: float) -> dict[str, str]:
    """A range's mean, low quantile and sample count: what `WindowStats` is read from."""
    return {"mean": f"avg_over_time({series})", "low": f"quantile_over_time({quantile:g}, {series})",
            "samples": f"count_over_time({series})"}


def throttle_window_queries(matchers: str, *, window_seconds: float, step_seconds: float, quantile: float
                            ) -> dict[str, str]:
    """Per node over the window: how many GPUs a power cap or heat held below their clocks (a step
    where none was has no sample, so `samples` counts the throttled steps)."""
    reasons = f"max by ({BY_UNIT}) ({selector(dcgm.CLOCK_THROTTLE_REASONS, matchers)})"
    held = dcgm.reason_bits_set(reasons, dcgm.HELD_DOWN_REASONS)
    return _over_time(f"(count by ({_NODE}) ({held}))[{int(window_seconds)}s:{int(step_seconds)}s]", quantile)
