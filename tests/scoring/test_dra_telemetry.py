"""dcgm-exporter's pod mapping for GPUs the NVIDIA DRA driver allocated, read like the device-plugin
mapping: through a real Prometheus and through the exposition-text parser. Where pods share a claim
the exporter writes a GPU's series once per pod; the GPU still counts once."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scoring.heat import fleet_heat
from scoring.ingest.series import series_from_families, snapshot_from_readings
from scoring.policy import default_policy
from tests.conftest import FIXTURES, read_through

TEXT = (FIXTURES / "dcgm-exporter-dra-gh200-shared-claim.txt").read_text()
NOW = datetime.now(timezone.utc)
NODE = "sc-starwars-xxxx"


def assert_read_right(snapshot) -> None:
    """What a person reading the file concludes: three GPUs (one shared by pod1 and pod2), engine
    activity 61.2 / 95.4 / 0 %, memory and power of three GPUs, not four."""
    (node,) = snapshot.nodes
    assert (snapshot.node_label, node.name, node.gpus) == ("Hostname", NODE, 3)
    assert node.util_mean == pytest.approx((61.2 + 95.4 + 0.0) / 3, abs=1e-6)
    assert node.power_w == pytest.approx(402.5 + 611.25 + 88.0)
    assert node.fb_used_mib == pytest.approx(56911 + 89679) and node.fb_total_mib == pytest.approx(
        56911 + 40960 + 89679 + 8192 + 97871)
    assert [(p.namespace, p.name, p.gpus, round(p.util_percent, 3)) for p in node.pods] == [
        ("gpu-test3", "pod1", 1, 61.2), ("gpu-test3", "pod3", 1, 95.4)], "a shared GPU is credited to one pod"
    heat = fleet_heat(snapshot, default_policy().heat, now=NOW, staleness_limit_seconds=1e9).nodes[0]
    assert heat.gpus_free == 1


def test_the_parser_reads_dra_mode_exposition_as_the_device_plugin_mapping():
    readings = series_from_families(text_string_to_metric_families(TEXT))
    assert_read_right(snapshot_from_readings(readings, taken_at=NOW, newest_sample_at=NOW))


@pytest.mark.parametrize("path", ["raw", "recorded"])
def test_prometheus_reads_dra_mode_exposition_and_counts_a_shared_gpu_once(path, exposition_server, prometheus):
    prom = prometheus(exposition_server(TEXT), recorded=path == "recorded")
    prom.wait_for("DCGM_FI_DEV_POWER_USAGE", at_least=4)
    assert_read_right(read_through(prom, default_policy(), path))


KSM = """# kube-state-metrics lists GPU requests of device-plugin pods only: a DRA pod requests no extended resource
kube_pod_container_resource_requests{namespace="other",pod="plugin-pod",uid="u1",container="c",node="n9",resource="nvidia_com_gpu",unit="integer"} 1
kube_pod_status_phase{namespace="other",pod="plugin-pod",uid="u1",phase="Running"} 1
kube_node_status_allocatable{node="n9",resource="nvidia_com_gpu",unit="integer"} 8
"""


@pytest.mark.parametrize("path", ["raw", "recorded"])
def test_with_kube_state_metrics_scraped_dra_pods_are_still_credited(path, exposition_server, prometheus):
    """kube-state-metrics knows no GPU request of a DRA pod; the exporter's DRA labels say it holds one."""
    prom = prometheus(exposition_server(TEXT), exposition_server(KSM), honor_labels=True,
                      recorded=path == "recorded")
    prom.wait_for("DCGM_FI_DEV_POWER_USAGE", at_least=4)
    prom.wait_for("kube_node_status_allocatable")
    assert_read_right(read_through(prom, default_policy(), path))
