"""A prometheus-client Collector that serves the latest GPU reading with dcgm-exporter's names. Pure.

Readings are taken on a timer elsewhere; a scrape only formats what is stored, so it costs
microseconds and never touches the GPU.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from scoring import dcgm
from scoring.ingest import exporter_text
from scoring.ingest.telemetry import GpuSample


class DcgmCompatibleCollector(Collector):
    def __init__(self, *, hostname_label: str = "Hostname") -> None:
        self.hostname_label = hostname_label
        self.samples: tuple[GpuSample, ...] = ()
        """Replaced whole by the reader thread; a scrape reads one reference."""

    def collect(self) -> Iterator[Metric]:
        samples = self.samples
        rows = [(dict(exporter_text.exporter_labels(s, self.hostname_label)),
                 exporter_text.exporter_values(s, profiling=False)) for s in samples]
        # Every gauge any GPU gives: one that the first GPU lacks (clock reasons) still has a family.
        for metric in dict.fromkeys(metric for _, values in rows for metric in values):
            family = Metric(metric, dcgm.HELP[metric][1], "gauge")
            for labels, values in rows:
                # Label sets may differ between GPUs (MIG, pods): samples carry their own.
                if values.get(metric) is not None:
                    family.add_sample(metric, labels, float(values[metric]))
            yield family
