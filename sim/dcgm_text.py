"""Render GPU readings as exposition text shaped exactly like NVIDIA dcgm-exporter's. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scoring import dcgm
from scoring.telemetry import GpuSample

HOSTNAME_LABELS = ("Hostname", "hostname")
"""Released dcgm-exporter versions write `Hostname`; the newer main branch writes `hostname`."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_exposition(readings: Sequence[GpuSample], *, hostname_label: str = "Hostname",
                      profiling: bool = False) -> str:
    """Exposition text for every reading, one family at a time with `# HELP` and `# TYPE`."""
    if hostname_label not in HOSTNAME_LABELS:
        raise ValueError(f"hostname label must be one of {HOSTNAME_LABELS}")
    prefixes = [_label_prefix(r, hostname_label) for r in readings]
    families: list[tuple[str, Iterable[float | int | None]]] = [
        (dcgm.GPU_TEMP, (r.temperature_c for r in readings)),
        (dcgm.POWER_USAGE, (r.power_w for r in readings)),
        (dcgm.GPU_UTIL, (r.util_percent for r in readings)),
        (dcgm.XID_ERRORS, (r.last_xid for r in readings)),
        (dcgm.FB_FREE, (r.fb_free_mib for r in readings)),
        (dcgm.FB_USED, (r.fb_used_mib for r in readings)),
    ]
    if profiling:
        families.append((dcgm.GR_ENGINE_ACTIVE,
                         (None if r.util_percent is None else r.util_percent / 100 for r in readings)))
    lines: list[str] = []
    for metric, values in families:
        kind, text = dcgm.HELP[metric]
        lines.append(f"# HELP {metric} {text}")
        lines.append(f"# TYPE {metric} {kind}")
        # A reading the GPU could not give is left out, as dcgm-exporter does.
        lines.extend(f"{metric}{{{prefix}}} {_number(value)}"
                     for prefix, value in zip(prefixes, values) if value is not None)
    return "\n".join(lines) + "\n"


def _label_prefix(reading: GpuSample, hostname_label: str) -> str:
    labels = [
        ("gpu", reading.gpu),
        ("UUID", reading.uuid),
        ("pci_bus_id", f"00000000:{0x18 + int(reading.gpu) * 0x10:02X}:00.0"),
        ("device", f"nvidia{reading.gpu}"),
        ("modelName", reading.model),
        (hostname_label, reading.node),
    ]
    if reading.pod is not None:
        labels += [("container", reading.pod.container), ("namespace", reading.pod.namespace),
                   ("pod", reading.pod.name)]
    return ",".join(f'{key}="{_escape(value)}"' for key, value in labels)


def _number(value: float | int) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))
