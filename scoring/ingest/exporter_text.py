"""How the exporters we ship (the NVML exporter, the simulator's fake dcgm-exporter) label and
value one GPU's series, as dcgm-exporter does. Pure, no I/O."""

from __future__ import annotations

from scoring import dcgm
from scoring.ingest.telemetry import GpuSample


def exporter_labels(sample: GpuSample, hostname_label: str = "Hostname") -> list[tuple[str, str]]:
    """The labels dcgm-exporter puts on one GPU's series, in its order, for the exporters we ship."""
    if hostname_label not in dcgm.HOSTNAME_LABELS:
        raise ValueError(f"hostname label must be one of {dcgm.HOSTNAME_LABELS}")
    labels = [("gpu", sample.gpu), ("UUID", sample.uuid), ("pci_bus_id", sample.pci_bus_id),
              ("device", f"nvidia{sample.gpu}"), ("modelName", sample.model), (hostname_label, sample.node)]
    if sample.mig_profile:
        labels += [("GPU_I_PROFILE", sample.mig_profile), ("GPU_I_ID", sample.mig_instance)]
    if sample.pod is not None:
        labels += [("container", sample.pod.container), ("namespace", sample.pod.namespace), ("pod", sample.pod.name)]
    return labels


def exporter_values(sample: GpuSample, profiling: bool) -> dict[str, float | None]:
    """Each gauge's value for one GPU; None where the GPU could not tell (the series is left out)."""
    values: dict[str, float | None] = {
        dcgm.GPU_TEMP: sample.temperature_c, dcgm.POWER_USAGE: sample.power_w, dcgm.GPU_UTIL: sample.util_percent,
        dcgm.XID_ERRORS: sample.last_xid, dcgm.FB_FREE: sample.fb_free_mib, dcgm.FB_USED: sample.fb_used_mib,
    }
    if profiling:
        values[dcgm.GR_ENGINE_ACTIVE] = None if sample.util_percent is None else sample.util_percent / 100
    if sample.clock_reasons is not None:
        values[dcgm.CLOCK_THROTTLE_REASONS] = sample.clock_reasons
    if sample.sm_clock_mhz is not None:
        values[dcgm.SM_CLOCK] = sample.sm_clock_mhz
    if sample.pcie_tx_bytes is not None:
        values[dcgm.PCIE_TX_BYTES] = sample.pcie_tx_bytes
    if sample.pcie_rx_bytes is not None:
        values[dcgm.PCIE_RX_BYTES] = sample.pcie_rx_bytes
    return values
