"""Building snapshots from series: node label detection, workload pod rules, saved exporter text."""

from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scoring import dcgm
from scoring.dcgm import BusyMeasure
from scoring.ingest.series import (Series, aggregate_samples, build_snapshot, detect_node_label, gpu_samples,
                                   series_from_families, snapshot_from_readings)
from scoring.ingest.telemetry import GpuKind, GpuSample, PodRef, PodUsage
from tests.conftest import FIXTURES

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def readings_of(name: str):
    return series_from_families(text_string_to_metric_families((FIXTURES / name).read_text()))


def test_released_exporter_text_names_the_node_by_Hostname_and_the_pod_by_pod():
    busy, idle = gpu_samples(readings_of("dcgm-exporter-3.3-Hostname.txt"))
    assert (busy.node, busy.gpu, busy.util_percent, busy.fb_used_mib, busy.temperature_c) == (
        "gpu-a100-1", "0", 97.0, 76483.0, 71.0)
    assert busy.pod == PodRef("serving", "llama-7b-6d9f8c7b5-x2k4p", "triton")
    assert busy.model == "NVIDIA A100-SXM4-80GB"
    assert idle.pod is None
    assert idle.last_xid == 13, "XID is the code of the last error, read as is"


def test_released_exporter_text_aggregates_into_node_telemetry():
    snapshot = snapshot_from_readings(readings_of("dcgm-exporter-3.3-Hostname.txt"), taken_at=NOW)
    assert snapshot.node_label == "Hostname"
    (node,) = snapshot.nodes
    assert (node.name, node.gpus, node.util_mean, node.util_max) == ("gpu-a100-1", 2, 48.5, 97.0)
    assert (node.fb_used_mib, node.fb_total_mib, node.temperature_max_c) == (
        76483.0, 76483.0 + 4437.0 + 81043.0, 71.0)
    assert node.power_w == pytest.approx(352.117 + 61.293)
    assert node.xids == (("1", 13),)
    assert node.pods == (PodUsage("serving", "llama-7b-6d9f8c7b5-x2k4p", 1, 97.0),)
    assert node.gpu_kinds == (GpuKind("NVIDIA A100-SXM4-80GB", "", 2),)


def test_newer_exporter_text_uses_lowercase_hostname_mig_instances_and_profiling_metrics():
    readings = readings_of("dcgm-exporter-main-hostname-mig-profiling.txt")
    gpus = gpu_samples(readings)
    assert [(g.gpu, g.mig_instance, g.mig_profile) for g in gpus] == [("0", "", ""), ("1", "1", "3g.40gb"),
                                                                     ("1", "2", "3g.40gb")]
    assert gpus[0].util_percent == pytest.approx(23.1466), "GR_ENGINE_ACTIVE beats GPU_UTIL's 100"
    assert gpus[1].pod == PodRef("research", "bert-train-0", "worker")
    snapshot = snapshot_from_readings(readings, taken_at=NOW)
    assert snapshot.node_label == "hostname"
    assert snapshot.nodes[0].gpu_kinds == (GpuKind("NVIDIA H100 80GB HBM3", "", 1),
                                           GpuKind("NVIDIA H100 80GB HBM3", "3g.40gb", 2))


def test_gpu_util_is_used_when_profiling_metrics_are_switched_off():
    gpus = gpu_samples(readings_of("dcgm-exporter-main-hostname-mig-profiling.txt"), busy=BusyMeasure(None))
    assert gpus[0].util_percent == 100.0


def test_behind_a_servicemonitor_the_workload_is_exported_pod_and_the_node_is_relabelled():
    snapshot = snapshot_from_readings(readings_of("prometheus-federate-servicemonitor.txt"), taken_at=NOW)
    assert snapshot.node_label == "node", "a relabelled node beats Hostname, which names the exporter pod"
    assert [n.name for n in snapshot.nodes] == ["gpu-l40s-3", "gpu-l40s-4"]
    first, second = snapshot.nodes
    assert first.pods == (PodUsage("chat", "vllm-7b-5d4f-abcde", 1, 88.0),)
    assert second.pods == (), "the exporter's own `pod` label is not an allocation"


def test_a_bare_pod_label_shared_by_every_gpu_of_a_node_is_the_exporter_pod():
    labels = [{"Hostname": "n1", "gpu": str(i), "pod": "dcgm-exporter-abc", "namespace": "gpu-operator"}
              for i in range(4)]
    labels += [{"Hostname": "n2", "gpu": "0", "pod": "web-1", "namespace": "a"}, {"Hostname": "n2", "gpu": "1"}]
    n1, n2 = snapshot_from_readings({dcgm.GPU_UTIL: [Series(lab, 1.0) for lab in labels],
                                     dcgm.FB_USED: [Series(lab, 1.0) for lab in labels]}, taken_at=NOW).nodes
    assert n1.pods == ()
    assert n2.pods == (PodUsage("a", "web-1", 1, 1.0),)


@pytest.mark.parametrize(("present", "expected"), [
    (["hostname"], "hostname"),
    (["Hostname"], "Hostname"),
    (["Hostname", "nodename"], "nodename"),
    (["Hostname", "kubernetes_node", "nodename"], "kubernetes_node"),
    (["hostname", "node", "kubernetes_node"], "node"),
    ([], ""),
])
def test_the_node_label_is_detected_in_the_documented_order(present, expected):
    rows = [Series({label: f"value-{label}" for label in present} | {"gpu": "0"}, 1.0)]
    assert detect_node_label(rows) == expected


def test_a_configured_node_label_is_used_as_is():
    readings = {dcgm.GPU_UTIL: [Series({"Hostname": "pod-x", "instance_node": "n7", "gpu": "0"}, 1.0)]}
    snapshot = snapshot_from_readings(readings, taken_at=NOW, node_label="instance_node")
    assert [n.name for n in snapshot.nodes] == ["n7"]


def test_nodes_seen_recently_but_silent_now_are_vanished():
    rows = aggregate_samples([GpuSample(node="n1", gpu="0", util_percent=1.0)])
    seen = [Series({"node": "n1"}, 2), Series({"node": "n2"}, 8)]
    snapshot = build_snapshot(rows, taken_at=NOW, gpus_seen_recently=seen)
    assert snapshot.vanished_nodes == ("n2",)
    assert snapshot.nodes[0].gpus_vanished == 1


def test_rows_for_one_node_under_several_label_sets_are_merged():
    rows = {
        "gpu_util": [Series({"node": "n", "Hostname": "exporter-a", "modelName": "m", "gpu": g}, 1.0) for g in "01"]
        + [Series({"node": "n", "Hostname": "exporter-b", "modelName": "m", "gpu": "2"}, 1.0)],
        "sums": [Series({"node": "n", "__name__": metric, "Hostname": host}, value)
                 for metric, host, value in ((dcgm.FB_USED, "exporter-a", 10.0), (dcgm.FB_USED, "exporter-b", 5.0),
                                             (dcgm.FB_FREE, "exporter-a", 10.0), (dcgm.FB_FREE, "exporter-b", 5.0))],
        "fb_counts": [Series({"node": "n", "__name__": metric, "Hostname": "exporter-a"}, 1.0)
                      for metric in (dcgm.FB_USED, dcgm.FB_FREE)],
        "temperature_max": [Series({"node": "n", "Hostname": "exporter-a"}, 60.0),
                            Series({"node": "n", "Hostname": "exporter-b"}, 70.0)],
    }
    (node,) = build_snapshot(rows, taken_at=NOW).nodes
    assert (node.gpus, node.fb_used_mib, node.memory_used_fraction, node.temperature_max_c) == (3, 15.0, 0.5, 70.0)


def test_series_without_a_node_label_are_reported_not_guessed():
    snapshot = snapshot_from_readings({dcgm.GPU_UTIL: [Series({"gpu": "0"}, 1.0)]}, taken_at=NOW)
    assert snapshot.nodes == ()
    assert snapshot.warnings and "node label" in snapshot.warnings[0]


def test_gpus_are_ordered_numerically():
    readings = {dcgm.GPU_UTIL: [Series({"Hostname": "n", "gpu": str(i)}, 1.0) for i in (10, 2, 1)]}
    assert [g.gpu for g in gpu_samples(readings)] == ["1", "2", "10"]


def test_topology_labels_come_from_kube_state_metrics_node_labels():
    from scoring.ingest.series import ksm_label_name

    assert ksm_label_name("nvidia.com/gpu.clique") == "label_nvidia_com_gpu_clique"
    rows = aggregate_samples([GpuSample(node="n1", gpu="0", util_percent=1.0)])
    labels = [Series({"node": "n1", "label_nvidia_com_gpu_clique": "c.1", "label_topology_kubernetes_io_zone": "z"}, 1)]
    (n1,) = build_snapshot(rows, taken_at=NOW, node_labels=labels,
                           topology_keys=("nvidia.com/gpu.clique", "topology.kubernetes.io/zone")).nodes
    assert n1.topology == (("nvidia.com/gpu.clique", "c.1"), ("topology.kubernetes.io/zone", "z"))
