"""Real dcgm-exporter and kube-state-metrics output (tests/fixtures/real_exporters), read through a
real Prometheus and through the exposition-text parser, against what a person reading each file
concludes: nodes, units per node (MIG instances as units), utilisation, memory where known, the
workload pods, and health."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scoring import dcgm
from scoring.heat import Tier, fleet_heat
from scoring.ingest.series import Series, series_from_families, snapshot_from_readings
from scoring.ingest.telemetry import PodUsage
from scoring.policy import default_policy
from tests.conftest import FIXTURES, read_through

REAL = FIXTURES / "real_exporters"
NOW = datetime.now(timezone.utc)
H100 = "NVIDIA H100 80GB HBM3"


def answers_as_exposition(markdown: str) -> str:
    """The Prometheus answers stored in a Markdown file, back as exposition text with exactly the
    stored labels (target labels included, for an `honor_labels` scrape) and no timestamps."""
    lines = []
    for block in re.findall(r"```\n(.*?)```", markdown, re.S):
        for row in json.loads(block)["data"]["result"]:
            labels = dict(row["metric"])
            name = labels.pop("__name__")
            body = ",".join(f'{key}="{value}"' for key, value in labels.items())
            lines.append(f"{name}{{{body}}} {row['value'][1]}")
    return "\n".join(lines) + "\n"


def text_of(name: str) -> str:
    raw = (REAL / name).read_text()
    return answers_as_exposition(raw) if name.endswith(".md") else raw


@dataclass(frozen=True)
class Reading:
    """What a careful person concludes from one node of a file."""

    units: int
    kinds: tuple[tuple[str, str, int], ...]
    util: float
    memory: float | None
    pods: tuple[PodUsage, ...] = ()
    tier: Tier = Tier.COOL
    reason: str = ""
    free: int | None = None
    partial: bool = False


@dataclass(frozen=True)
class Case:
    files: tuple[str, ...]
    node_label: str
    nodes: dict[str, Reading] = field(default_factory=dict)


VLLM = PodUsage("dynamo-workload", "vllm-agg-0-vllmdecodeworker-s65j5", 1, 0.0)
LKE_NODE = "lke529760-766837-0a634ab30000"
LKE = Reading(1, (("NVIDIA RTX 4000 Ada Generation", "", 1),), 0.4656, 1 / 20016,
              (PodUsage("default", "cuda-75454ffb9f-8ljq7", 1, 0.4656),), free=0)
CASES = {
    # honorLabels: true — idle GPUs carry the exporter's own pod; only GPU 0 of node 1 is the vLLM pod.
    # FB_FREE was not queried, so memory is unknown (not full).
    "aicr-servicemonitor": Case(("aicr-h100-2nodes-promql-servicemonitor.md",), "Hostname", {
        "gpu-node-1": Reading(8, ((H100, "", 8),), 0.0, None, (VLLM,), free=7, partial=True),
        "gpu-node-2": Reading(8, ((H100, "", 8),), 0.0, None, (), free=8, partial=True)}),
    "aicr-servicemonitor+ksm": Case(("aicr-h100-2nodes-promql-servicemonitor.md", "ksm-gpu-allocation-adapted.txt"),
                                    "Hostname", {
        "gpu-node-1": Reading(8, ((H100, "", 8),), 0.0, None, (VLLM,), free=7, partial=True),
        "gpu-node-2": Reading(8, ((H100, "", 8),), 0.0, None, (), free=8, partial=True)}),
    "aicr-exporter-text": Case(("aicr-h100-gpu-node-1-exposition-sampled.txt",), "Hostname", {
        "gpu-node-1": Reading(8, ((H100, "", 8),), 0.0, None, (VLLM,), free=7, partial=True)}),
    "lke-mapping": Case(("lke-rtx4000ada-k8s-mapping.txt",), "Hostname", {LKE_NODE: LKE}),
    "lke-lowercase": Case(("lke-rtx4000ada-lowercase-hostname-adapted.txt",), "hostname", {LKE_NODE: LKE}),
    "lke-xid79": Case(("lke-rtx4000ada-xid79-adapted.txt",), "Hostname", {
        LKE_NODE: replace(LKE, tier=Tier.UNHEALTHY, reason="critical XID 79")}),
    # MIG mode: the GPU's own row is the parent; the one 1g.5gb instance is the unit. Memory from the parent.
    "a100-mig": Case(("nvidia-docs-a100-mig-1g5gb.txt",), "Hostname", {
        "ub20-a100-k8s": Reading(1, (("", "1g.5gb", 1),), 99.5687, 4845 / (4845 + 35690), tier=Tier.HOT,
                                 reason="mean GPU util", free=1)}),
    "a30-mig": Case(("dcgm-exporter-issue-317-a30-mig-1g6gb.txt",), "Hostname", {
        "yg-data-k8s-gpu-a30-node-test-test0003.mt": Reading(5, (("NVIDIA A30", "1g.6gb", 5),), 0.0, 3 / 6015, free=5)}),
    # H100 MIG instances report no framebuffer series at all, and no temperature in this excerpt.
    "h100-mig-prof-only": Case(("dcgm-exporter-issue-512-h100-mig-1g10gb-prof-only.txt",), "Hostname", {
        "gsrh100-074": Reading(3, ((H100, "1g.10gb", 3),), 0.0, None, (
            PodUsage("model-playground-stg", "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl", 1, 0.0),
            PodUsage("model-playground-stg", "tts-predictor-00011-deployment-5554f75554-8j8pl", 1, 0.0)),
            free=1, partial=True)}),
}


def assert_read_right(case: Case, snapshot) -> None:
    policy = default_policy()
    fleet = fleet_heat(snapshot, policy.heat, now=NOW, staleness_limit_seconds=1e9)
    heats = {n.name: n for n in fleet.nodes}
    assert snapshot.node_label == case.node_label
    assert sorted(heats) == sorted(case.nodes)
    for name, expected in case.nodes.items():
        node, heat = snapshot.by_name[name], heats[name]
        assert node.gpus == expected.units, name
        assert tuple((k.model, k.mig_profile, k.count) for k in node.gpu_kinds) == expected.kinds, name
        assert node.util_mean == pytest.approx(expected.util, abs=1e-3), name
        if expected.memory is None:
            assert heat.memory_used_fraction is None, name
        else:
            assert heat.memory_used_fraction == pytest.approx(expected.memory, rel=1e-6), name
        assert tuple((p.namespace, p.name, p.gpus) for p in node.pods) == tuple(
            (p.namespace, p.name, p.gpus) for p in expected.pods), name
        assert heat.tier is expected.tier, (name, heat.reasons)
        if expected.reason:
            assert any(expected.reason in r for r in heat.reasons), heat.reasons
        assert heat.gpus_free == expected.free, name
        assert heat.partial is expected.partial, (name, heat.signals)


def parsed(case: Case):
    text = "".join(text_of(name) for name in case.files)
    readings = series_from_families(text_string_to_metric_families(text))
    return snapshot_from_readings(readings, taken_at=NOW, newest_sample_at=NOW)


EXPORTER_ONLY = {name: case for name, case in CASES.items() if not any(f.startswith("ksm-") for f in case.files)}
"""kube-state-metrics series are read only through Prometheus."""


@pytest.mark.parametrize("case", EXPORTER_ONLY.values(), ids=EXPORTER_ONLY.keys())
def test_the_parser_reads_each_real_exporter_file_as_a_person_would(case):
    assert_read_right(case, parsed(case))


@pytest.mark.parametrize("path", ["raw", "recorded"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_prometheus_reads_each_real_exporter_file_as_a_person_would(case, path, exposition_server, prometheus):
    # Through the recording rules too: per-node records and per-pod rows in place of per-GPU rows.
    prom = prometheus(*(exposition_server(text_of(name)) for name in case.files), honor_labels=True,
                      recorded=path == "recorded")
    prom.wait_for(f'{{__name__=~"{"|".join(dcgm.UTILISATION_METRICS)}"}}',
                  at_least=sum(r.units for r in case.nodes.values()))
    if any(name.startswith("ksm-") for name in case.files):
        prom.wait_for("kube_node_status_allocatable")
    assert_read_right(case, read_through(prom, default_policy(), path))


def test_an_unmarked_pod_on_every_gpu_is_reported_as_unsure_not_guessed():
    labels = [{"Hostname": "n1", "gpu": str(i), "pod": "whole-node-job-0", "namespace": "ml"} for i in range(4)]
    snapshot = snapshot_from_readings({dcgm.GPU_UTIL: [Series(lab, 50.0) for lab in labels]}, taken_at=NOW)
    assert snapshot.nodes[0].pods == ()
    assert any("whole-node-job-0" in w and "not counted" in w for w in snapshot.warnings)


def test_status_reads_the_servicemonitor_fleet_and_marks_partial_telemetry(exposition_server, prometheus):
    prom = prometheus(exposition_server(text_of("aicr-h100-2nodes-promql-servicemonitor.md")), honor_labels=True)
    prom.wait_for(dcgm.GPU_UTIL, at_least=16)
    result = subprocess.run([sys.executable, "-m", "gpu_balancer", "status", "--prometheus-url", prom.url,
                             "--output", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    nodes = {n["name"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["gpu-node-1"]["gpus_free"] == 7 and nodes["gpu-node-2"]["gpus_free"] == 8
    assert nodes["gpu-node-1"]["memory_used_fraction"] is None and nodes["gpu-node-1"]["partial"] is True
    assert nodes["gpu-node-1"]["tier"] == "cool"
    table = subprocess.run([sys.executable, "-m", "gpu_balancer", "status", "--prometheus-url", prom.url],
                           capture_output=True, text=True, timeout=60)
    assert "cool*" in table.stdout and "partial telemetry (unknown: memory)" in table.stdout


def test_status_without_any_dcgm_series_exits_non_zero_saying_what_it_looked_for(exposition_server, prometheus):
    prom = prometheus(exposition_server(text_of("ksm-gpu-allocation-adapted.txt")), honor_labels=True)
    prom.wait_for("kube_node_status_allocatable")
    result = subprocess.run([sys.executable, "-m", "gpu_balancer", "status", "--prometheus-url", prom.url],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert "holds no DCGM GPU series" in result.stderr and dcgm.GR_ENGINE_ACTIVE in result.stderr
    assert "Traceback" not in result.stderr
