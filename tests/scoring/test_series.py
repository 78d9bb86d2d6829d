"""Building snapshots from series: node label detection, workload pod rules, saved exporter text."""

from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scoring import dcgm
from scoring.series import Series, build_snapshot, detect_node_label, series_from_families
from scoring.telemetry import PodRef
from tests.conftest import FIXTURES

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def from_fixture(name: str, **kwargs):
    text = (FIXTURES / name).read_text()
    return build_snapshot(series_from_families(text_string_to_metric_families(text)), taken_at=NOW, **kwargs)


def test_released_exporter_text_names_the_node_by_Hostname_and_the_pod_by_pod():
    snapshot = from_fixture("dcgm-exporter-3.3-Hostname.txt")
    assert snapshot.node_label == "Hostname"
    (node,) = snapshot.nodes
    assert node.name == "gpu-a100-1"
    busy, idle = node.gpus
    assert (busy.gpu, busy.util_percent, busy.fb_used_mib, busy.temperature_c) == ("0", 97.0, 76483.0, 71.0)
    assert busy.pod == PodRef("serving", "llama-7b-6d9f8c7b5-x2k4p", "triton")
    assert busy.model == "NVIDIA A100-SXM4-80GB"
    assert idle.pod is None
    assert idle.last_xid == 13, "XID is the code of the last error, read as is"


def test_newer_exporter_text_uses_lowercase_hostname_mig_instances_and_profiling_metrics():
    snapshot = from_fixture("dcgm-exporter-main-hostname-mig-profiling.txt")
    assert snapshot.node_label == "hostname"
    gpus = snapshot.nodes[0].gpus
    assert [(g.gpu, g.mig_instance, g.mig_profile) for g in gpus] == [("0", "", ""), ("1", "1", "3g.40gb"),
                                                                     ("1", "2", "3g.40gb")]
    assert gpus[0].util_percent == pytest.approx(23.1466), "GR_ENGINE_ACTIVE beats GPU_UTIL's 100"
    assert gpus[1].pod == PodRef("research", "bert-train-0", "worker")


def test_gpu_util_is_used_when_profiling_metrics_are_switched_off():
    snapshot = from_fixture("dcgm-exporter-main-hostname-mig-profiling.txt", use_profiling_metrics=False)
    assert snapshot.nodes[0].gpus[0].util_percent == 100.0


def test_behind_a_servicemonitor_the_workload_is_exported_pod_and_the_node_is_relabelled():
    snapshot = from_fixture("prometheus-federate-servicemonitor.txt")
    assert snapshot.node_label == "node", "a relabelled node beats Hostname, which names the exporter pod"
    assert [n.name for n in snapshot.nodes] == ["gpu-l40s-3", "gpu-l40s-4"]
    first, second = snapshot.nodes
    assert first.gpus[0].pod == PodRef("chat", "vllm-7b-5d4f-abcde", "vllm")
    assert first.gpus[1].pod is None, "the exporter's own `pod` label is not an allocation"
    assert all(g.pod is None for g in second.gpus)


def test_a_bare_pod_label_shared_by_every_gpu_of_a_node_is_the_exporter_pod():
    labels = [{"Hostname": "n1", "gpu": str(i), "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"}
              for i in range(4)]
    labels += [{"Hostname": "n2", "gpu": "0", "pod": "web-1", "namespace": "a"}, {"Hostname": "n2", "gpu": "1"}]
    snapshot = build_snapshot({dcgm.FB_USED: [Series(lab, 1.0) for lab in labels]}, taken_at=NOW)
    n1, n2 = snapshot.nodes
    assert all(g.pod is None for g in n1.gpus)
    assert n2.gpus[0].pod == PodRef("a", "web-1") and n2.gpus[1].pod is None


@pytest.mark.parametrize(("present", "expected"), [
    (["hostname"], "hostname"),
    (["Hostname"], "Hostname"),
    (["Hostname", "nodename"], "nodename"),
    (["Hostname", "kubernetes_node", "nodename"], "kubernetes_node"),
    (["hostname", "node", "kubernetes_node"], "node"),
    ([], ""),
])
def test_the_node_label_is_detected_in_the_documented_order(present, expected):
    readings = {dcgm.GPU_UTIL: [Series({label: f"value-{label}" for label in present} | {"gpu": "0"}, 1.0)]}
    assert detect_node_label(readings) == expected


def test_a_configured_node_label_is_used_as_is():
    readings = {dcgm.GPU_UTIL: [Series({"Hostname": "pod-x", "instance_node": "n7", "gpu": "0"}, 1.0)]}
    snapshot = build_snapshot(readings, taken_at=NOW, node_label="instance_node")
    assert [n.name for n in snapshot.nodes] == ["n7"]


def test_nodes_seen_recently_but_silent_now_are_vanished():
    readings = {dcgm.GPU_UTIL: [Series({"Hostname": "n1", "gpu": "0"}, 1.0)]}
    snapshot = build_snapshot(readings, taken_at=NOW, gpus_seen_recently={"n1": 2, "n2": 8})
    assert snapshot.vanished_nodes == ("n2",)
    assert snapshot.nodes[0].gpus_seen_recently == 2


def test_series_without_a_node_label_are_reported_not_guessed():
    snapshot = build_snapshot({dcgm.GPU_UTIL: [Series({"gpu": "0"}, 1.0)]}, taken_at=NOW)
    assert snapshot.nodes == ()
    assert snapshot.warnings and "node label" in snapshot.warnings[0]


def test_gpus_are_ordered_numerically():
    readings = {dcgm.GPU_UTIL: [Series({"Hostname": "n", "gpu": str(i)}, 1.0) for i in (10, 2, 1)]}
    assert [g.gpu for g in build_snapshot(readings, taken_at=NOW).nodes[0].gpus] == ["1", "2", "10"]
