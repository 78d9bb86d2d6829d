"""Render GPU readings as exposition text shaped exactly like NVIDIA dcgm-exporter's. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scoring import dcgm
from scoring.ingest import exporter_text
from scoring.ingest.telemetry import GpuSample


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_exposition(readings: Sequence[GpuSample], *, hostname_label: str = "Hostname",
                      profiling: bool = False, extra: Sequence[Mapping[str, float | None]] = ()) -> str:
    """Exposition text for every reading, one family at a time with `# HELP` and `# TYPE`; `extra`
    (one mapping per reading, metric → value) adds or overrides fields the sample does not carry."""
    prefixes = [",".join(f'{k}="{_escape(v)}"' for k, v in exporter_text.exporter_labels(r, hostname_label)) for r in readings]
    values = [exporter_text.exporter_values(r, profiling) for r in readings]
    for own, more in zip(values, extra):
        own.update(more)
    lines: list[str] = []
    for metric in dict.fromkeys(metric for own in values for metric in own):  # the first GPU may lack one
        kind, text = dcgm.HELP[metric]
        lines.append(f"# HELP {metric} {text}")
        lines.append(f"# TYPE {metric} {kind}")
        # A reading the GPU could not give is left out, as dcgm-exporter does.
        lines.extend(f"{metric}{{{prefix}}} {_number(v[metric])}"
                     for prefix, v in zip(prefixes, values) if v.get(metric) is not None)
    return "\n".join(lines) + "\n"


def _number(value: float | int) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))
