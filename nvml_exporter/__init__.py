"""An NVML-based exporter with dcgm-exporter-compatible metrics, for clusters without DCGM."""
