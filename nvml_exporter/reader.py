"""Read every GPU (and MIG instance) through NVML into `GpuSample`s (does I/O through `nvml`).

The `nvml` module is injected (normally `pynvml`), so the reader is exercised on recorded
readings in tests and on real GPUs where there are some. Each field and each GPU is read on its
own: a field a GPU does not support is left out, and a broken GPU is reported, not fatal.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from scoring.ingest.telemetry import GpuSample

_MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML could not be initialised: no driver, no library, or no permission."""


@dataclass(frozen=True, slots=True)
class Reading:
    samples: tuple[GpuSample, ...]
    errors: tuple[str, ...]
    """One line per GPU that could not be read at all."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _field(nvml: ModuleType, call, *args) -> Any:
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


def start(nvml: ModuleType) -> None:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML is not available on this machine: {error}") from None


class XidWatcher:
    """Remembers the last critical XID per GPU UUID from NVML events (a thread blocked in NVML)."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._events = None

    def last_xid(self, uuid: str) -> int:
        with self._lock:
            return self._last.get(uuid, 0)

    def start(self) -> bool:
        """Register for XID events on every GPU; False when the driver does not support them."""
        nvml = self._nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
        except nvml.NVMLError:
            return False
        threading.Thread(target=self._run, name="nvml-xid", daemon=True).start()
        return True

    def _run(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 1000)
            except nvml.NVMLError:
                continue  # timeout (the usual case) or a transient error: wait again
            uuid = _field(nvml, nvml.nvmlDeviceGetUUID, event.device)
            if uuid is not None:
                with self._lock:
                    self._last[_text(uuid)] = int(event.eventData)

    def stop(self) -> None:
        self._stop.set()


def _clock_reasons(nvml: ModuleType, handle: Any) -> int | None:
    """NVML's clock-event reasons bitmask (`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`): why the clocks
    are where they are — idle, a power cap, heat. Bindings name it `...ClocksEventReasons` since
    driver 535, `...ClocksThrottleReasons` before; None where neither answers."""
    call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    value = None if call is None else _field(nvml, call, handle)
    return None if value is None else int(value)


def _sm_clock(nvml: ModuleType, handle: Any) -> float | None:
    """The SM clock now, in MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`); None where it does not answer."""
    call = getattr(nvml, "nvmlDeviceGetClockInfo", None)
    return _field(nvml, call, handle, nvml.NVML_CLOCK_SM) if call is not None else None


def _pcie_bytes(nvml: ModuleType, handle: Any, counter: str) -> float | None:
    """Bytes a second over PCIe one way (`nvmlDeviceGetPcieThroughput`, which answers KB/s over a
    20 ms sample: `DCGM_FI_PROF_PCIE_TX_BYTES` / `_RX_BYTES` as dcgm-exporter samples them longer);
    None where it does not answer."""
    call = getattr(nvml, "nvmlDeviceGetPcieThroughput", None)
    value = _field(nvml, call, handle, getattr(nvml, counter)) if call is not None else None
    return None if value is None else float(value) * 1024


def _mig_profile(name: str) -> str:
    # MIG device names end in the profile: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
    return name.rsplit("MIG ", 1)[1].strip() if "MIG " in name else ""


def read_gpus(nvml: ModuleType, node: str, xids: XidWatcher | None = None) -> Reading:
    samples: list[GpuSample] = []
    errors: list[str] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as error:
            errors.append(f"GPU {index}: {error}")
            continue
        model = _text(_field(nvml, nvml.nvmlDeviceGetName, handle) or "")
        pci = _field(nvml, nvml.nvmlDeviceGetPciInfo, handle)
        common = dict(node=node, gpu=str(index), uuid=uuid, model=model,
                      pci_bus_id=_text(pci.busId) if pci is not None else "",
                      last_xid=xids.last_xid(uuid) if xids else 0,
                      temperature_c=_field(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU))
        common["clock_reasons"] = _clock_reasons(nvml, handle)
        common["sm_clock_mhz"] = _sm_clock(nvml, handle)
        common["pcie_tx_bytes"] = _pcie_bytes(nvml, handle, "NVML_PCIE_UTIL_TX_BYTES")
        common["pcie_rx_bytes"] = _pcie_bytes(nvml, handle, "NVML_PCIE_UTIL_RX_BYTES")
        power = _field(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        common["power_w"] = power / 1000.0 if power is not None else None
        mig_mode = _field(nvml, nvml.nvmlDeviceGetMigMode, handle)
        if mig_mode is not None and mig_mode[0] == 1:
            # NVML measures PCIe per GPU: no instance's own traffic, so none is claimed for it.
            samples.extend(_read_mig(nvml, handle, {**common, "pcie_tx_bytes": None, "pcie_rx_bytes": None}))
            continue
        util = _field(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _field(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        samples.append(GpuSample(**common, util_percent=float(util.gpu) if util is not None else None,
                                 fb_used_mib=memory.used / _MIB if memory is not None else None,
                                 fb_free_mib=memory.free / _MIB if memory is not None else None))
    return Reading(tuple(samples), tuple(errors))


def _read_mig(nvml: ModuleType, handle: Any, common: dict[str, Any]) -> list[GpuSample]:
    """One sample per MIG instance; NVML gives no utilisation per instance, so it is left out."""
    samples = []
    for slot in range(_field(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mig = _field(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:
            continue  # an empty slot
        memory = _field(nvml, nvml.nvmlDeviceGetMemoryInfo, mig)
        samples.append(GpuSample(
            **common,
            mig_profile=_mig_profile(_text(_field(nvml, nvml.nvmlDeviceGetName, mig) or "")),
            mig_instance=str(_field(nvml, nvml.nvmlDeviceGetGpuInstanceId, mig)),
            fb_used_mib=memory.used / _MIB if memory is not None else None,
            fb_free_mib=memory.free / _MIB if memory is not None else None))
    return samples
