"""The NVML exporter: readings, exposition, parity with dcgm-exporter, and a real-GPU contract test."""

from __future__ import annotations

import threading
import time
import warnings
from datetime import datetime, timezone

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_balancer.cli import main
from gpu_balancer.local_prometheus import free_port
from nvml_exporter.collector import DcgmCompatibleCollector
from nvml_exporter.reader import NvmlUnavailable, XidWatcher, read_gpus, start
from nvml_exporter.serve import run
from scoring import dcgm
from scoring.heat import Tier, node_heat
from scoring.ingest.series import series_from_families, snapshot_from_readings
from scoring.policy import HeatPolicy
from sim.dcgm_text import render_exposition
from tests.nvml.recorded_nvml import GIB, RecordedNvml, h100_node

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


def exposition(samples) -> str:
    collector = DcgmCompatibleCollector()
    collector.samples = tuple(samples)
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_readings_are_converted_to_dcgm_units():
    reading = read_gpus(RecordedNvml(h100_node()), "node-a")
    gpu3 = reading.samples[3]
    assert (gpu3.node, gpu3.gpu, gpu3.model, gpu3.pci_bus_id) == ("node-a", "3", "NVIDIA H100 80GB HBM3",
                                                                  "00000000:48:00.0")
    assert gpu3.util_percent == 36.0
    assert gpu3.fb_used_mib == 27 * 1024 and gpu3.fb_free_mib == 53 * 1024
    assert gpu3.power_w == 250.0 and gpu3.temperature_c == 55


def test_one_broken_gpu_does_not_hide_the_others():
    reading = read_gpus(RecordedNvml(h100_node(), broken={2}), "node-a")
    assert [s.gpu for s in reading.samples] == ["0", "1", "3", "4", "5", "6", "7"]
    assert len(reading.errors) == 1 and "GPU 2" in reading.errors[0]


def test_an_unsupported_field_is_left_out_not_zeroed():
    gpus = h100_node(2)
    gpus[1]["power_mw"] = None
    samples = read_gpus(RecordedNvml(gpus), "n").samples
    text = exposition(samples)
    power = [s for f in text_string_to_metric_families(text) if f.name == dcgm.POWER_USAGE for s in f.samples]
    assert [s.labels["gpu"] for s in power] == ["0"]


def test_mig_instances_are_reported_with_their_profile_and_instance_id():
    gpus = h100_node(1)
    gpus[0]["mig"] = [{"name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "gi": 1, "used": 10 * GIB, "total": 40 * GIB},
                      {"name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "gi": 2, "used": 0, "total": 40 * GIB}]
    samples = read_gpus(RecordedNvml(gpus), "n").samples
    assert [(s.mig_profile, s.mig_instance, s.fb_used_mib) for s in samples] == [
        ("3g.40gb", "1", 10 * 1024), ("3g.40gb", "2", 0)]
    families = {f.name: f for f in text_string_to_metric_families(exposition(samples))}
    assert {s.labels["GPU_I_ID"] for s in families[dcgm.FB_USED].samples} == {"1", "2"}


def test_the_last_xid_comes_from_nvml_events():
    nvml = RecordedNvml(h100_node(2), xid_events=[(1, 79)])
    watcher = XidWatcher(nvml)
    assert watcher.start()
    deadline = time.monotonic() + 5
    while watcher.last_xid(h100_node(2)[1]["uuid"]) != 79 and time.monotonic() < deadline:
        time.sleep(0.01)
    watcher.stop()
    samples = read_gpus(nvml, "n", watcher).samples
    assert [s.last_xid for s in samples] == [0, 79]
    assert node_heat(snapshot_from_readings(series_from_families(text_string_to_metric_families(
        exposition(samples))), taken_at=NOW).nodes[0], HeatPolicy()).tier.name == "UNHEALTHY"


def test_the_exposition_has_dcgm_exporter_names_help_and_labels():
    text = exposition(read_gpus(RecordedNvml(h100_node(2)), "node-a").samples)
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in text
    assert "# TYPE DCGM_FI_DEV_FB_USED gauge" in text
    sample = next(s for f in text_string_to_metric_families(text) if f.name == dcgm.GPU_UTIL for s in f.samples)
    assert set(sample.labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}


def test_the_heat_model_reads_this_exporter_exactly_as_it_reads_dcgm_exporter():
    samples = read_gpus(RecordedNvml(h100_node()), "node-a").samples
    ours = snapshot_from_readings(series_from_families(text_string_to_metric_families(exposition(samples))),
                                  taken_at=NOW)
    dcgm_shaped = snapshot_from_readings(series_from_families(text_string_to_metric_families(
        render_exposition(samples))), taken_at=NOW)
    assert ours == dcgm_shaped
    assert ours.nodes[0].gpus == 8 and ours.nodes[0].util_mean == pytest.approx(sum(12 * i for i in range(8)) / 8)


@pytest.mark.parametrize("interval", [60.0])
def test_the_exporter_serves_over_http_and_scrapes_never_touch_the_gpus(interval):
    nvml = RecordedNvml(h100_node(4))
    port = free_port()
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(nvml,), kwargs=dict(node="node-a", port=port, interval=interval,
                                                                     host="127.0.0.1", stop=stop), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
                break
            except requests.ConnectionError:
                time.sleep(0.05)
        util = [s for f in text_string_to_metric_families(body) if f.name == dcgm.GPU_UTIL for s in f.samples]
        assert len(util) == 4 and {s.labels["Hostname"] for s in util} == {"node-a"}
        before = nvml.calls
        for _ in range(20):
            requests.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
        assert nvml.calls == before, "scrapes only format the stored reading; the timer reads the GPUs"
    finally:
        stop.set()
        thread.join(timeout=5)


def test_without_nvml_the_exporter_exits_non_zero_at_once(capsys):
    started = time.monotonic()
    code = main(["nvml-exporter", "--port", str(free_port())])
    err = capsys.readouterr().err
    if code == 0:  # pragma: no cover - only on a GPU machine, where the exporter would run
        pytest.skip("NVML is present here")
    assert code == 1 and "NVML" in err
    assert time.monotonic() - started < 10


def test_contract_on_a_real_nvidia_gpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml
    try:
        start(pynvml)
    except NvmlUnavailable as error:
        pytest.skip(f"no NVIDIA GPU here, real-GPU contract test skipped: {error}")
    reading = read_gpus(pynvml, "contract-node")
    assert reading.samples, reading.errors
    for sample in reading.samples:
        assert sample.uuid.startswith(("GPU-", "MIG-")) and sample.model
        assert sample.fb_used_mib is not None and sample.fb_free_mib is not None
        assert sample.temperature_c is None or 0 < sample.temperature_c < 130
        # Every data-centre GPU since Kepler answers the clock-event reasons; only NVML's bits are set.
        assert sample.clock_reasons is not None and sample.clock_reasons & ~0x1FF == 0, sample.clock_reasons
    collector = DcgmCompatibleCollector()
    collector.samples = reading.samples
    registry = CollectorRegistry()
    registry.register(collector)
    started = time.perf_counter()
    text = generate_latest(registry).decode()
    print(f"scrape of {len(reading.samples)} GPU(s): {(time.perf_counter() - started) * 1000:.3f} ms")
    assert dcgm.FB_USED in text


def test_clock_event_reasons_are_exported_and_a_power_capped_gpu_warms_its_node():
    samples = read_gpus(RecordedNvml(h100_node()), "node-a").samples
    assert [s.clock_reasons for s in samples] == [0x1, 0, 0, 0, 0, 0, 0, 0x4]
    text = exposition(samples)
    reasons = [s for f in text_string_to_metric_families(text) if f.name == dcgm.CLOCK_THROTTLE_REASONS
               for s in f.samples]
    assert [int(s.value) for s in reasons] == [0x1, 0, 0, 0, 0, 0, 0, 0x4]
    node = snapshot_from_readings(series_from_families(text_string_to_metric_families(text)), taken_at=NOW).nodes[0]
    heat = node_heat(node, HeatPolicy())
    assert node.gpus_power_capped == 1 and heat.throttled == "power cap" and heat.tier is Tier.WARM


def test_a_gpu_without_clock_reasons_leaves_them_out_and_hides_no_other_gpus():
    gpus = h100_node(3)
    gpus[0]["clock_reasons"] = None  # NOT_SUPPORTED on the first GPU only
    text = exposition(read_gpus(RecordedNvml(gpus), "n").samples)
    reasons = [s for f in text_string_to_metric_families(text) if f.name == dcgm.CLOCK_THROTTLE_REASONS
               for s in f.samples]
    assert [s.labels["gpu"] for s in reasons] == ["1", "2"]


def test_pcie_throughput_is_exported_in_bytes_a_second_and_left_out_where_nvml_cannot_tell():
    gpus = h100_node(3)
    gpus[0]["pcie_kbps"] = None
    text = exposition(read_gpus(RecordedNvml(gpus), "n").samples)
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    assert [(s.labels["gpu"], s.value) for s in families[dcgm.PCIE_TX_BYTES]] == [("1", 1000 * 1024), ("2", 2000 * 1024)]
    assert [(s.labels["gpu"], s.value) for s in families[dcgm.PCIE_RX_BYTES]] == [("1", 3000 * 1024), ("2", 6000 * 1024)]
