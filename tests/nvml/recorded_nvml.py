"""Recorded NVML answers from an 8-GPU H100 node, served through pynvml's own call signatures.

A stand-in for the NVML shared library (which needs a GPU and a driver), not for our code: the
reader under test makes exactly the calls it makes on a real node.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # the pynvml shim over nvidia-ml-py
    import pynvml

NVMLError = pynvml.NVMLError
NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

GIB = 1024 ** 3


class RecordedNvml:
    """Module-like object: attribute access mirrors `pynvml`'s functions."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError

    def __init__(self, gpus: list[dict], *, broken: set[int] = frozenset(), xid_events: list[tuple[int, int]] = ()):
        self.gpus, self.broken, self.xid_events = gpus, set(broken), list(xid_events)
        self.calls = 0

    def _gpu(self, handle):
        self.calls += 1
        return self.gpus[handle]

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index in self.broken:
            raise NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle)["uuid"]

    def nvmlDeviceGetName(self, handle):
        if isinstance(handle, tuple):
            return self.gpus[handle[0]]["mig"][handle[1]]["name"]
        return self._gpu(handle)["name"]

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=self._gpu(handle)["pci"].encode())

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._gpu(handle)["temp"]

    def nvmlDeviceGetPowerUsage(self, handle):
        power = self._gpu(handle).get("power_mw")
        if power is None:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return power

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        reasons = self._gpu(handle).get("clock_reasons")
        if reasons is None:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return reasons

    def nvmlDeviceGetPcieThroughput(self, handle, counter):
        """KB/s, as NVML answers it."""
        tx_rx = self._gpu(handle).get("pcie_kbps")
        if tx_rx is None:
            raise NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return tx_rx[0 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 1]

    def nvmlDeviceGetMigMode(self, handle):
        return (1, 1) if self._gpu(handle).get("mig") else (0, 0)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self._gpu(handle)["util"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        if isinstance(handle, tuple):
            mig = self.gpus[handle[0]]["mig"][handle[1]]
            return SimpleNamespace(used=mig["used"], free=mig["total"] - mig["used"], total=mig["total"])
        gpu = self._gpu(handle)
        return SimpleNamespace(used=gpu["used"], free=80 * GIB - gpu["used"], total=80 * GIB)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        if slot >= len(self._gpu(handle)["mig"]):
            raise NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle, slot)

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self.gpus[handle[0]]["mig"][handle[1]]["gi"]

    def nvmlEventSetCreate(self):
        return "events"

    def nvmlDeviceRegisterEvents(self, handle, kinds, events):
        pass

    def nvmlEventSetWait_v2(self, events, timeout_ms):
        if self.xid_events:
            index, xid = self.xid_events.pop(0)
            return SimpleNamespace(device=index, eventData=xid)
        raise NVMLError(pynvml.NVML_ERROR_TIMEOUT)


def h100_node(n: int = 8) -> list[dict]:
    return [{"uuid": f"GPU-6f1c2d3e-0000-4000-8000-00000000000{i}", "name": "NVIDIA H100 80GB HBM3",
             "pci": f"00000000:{0x18 + 0x10 * i:02X}:00.0", "temp": 40 + 5 * i, "power_mw": 100_000 + 50_000 * i,
             "util": 12 * i, "used": (i * 9) * GIB, "pcie_kbps": (1000 * i, 3000 * i),
             # GPU 0 idle (its clocks parked), GPU 7 at 450 W held down by its power cap.
             "clock_reasons": pynvml.nvmlClocksEventReasonGpuIdle if i == 0 else
             pynvml.nvmlClocksEventReasonSwPowerCap if i == 7 else 0} for i in range(n)]
