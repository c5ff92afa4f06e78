"""The card's mean SM clock and board power over a timed stretch, as `amber bench step`
reports them: NVML from the driver (libnvidia-ml.so.1 through ctypes), sampled every
20 ms on a thread. Where NVML is absent the report is empty."""

import ctypes
import threading
import time

NVML_SUCCESS, NVML_CLOCK_SM = 0, 1


class CardSampler:
    def __init__(self, props):
        """props: torch.cuda.get_device_properties of the card (NVML finds it by PCI id,
        since NVML's device order need not be CUDA's)."""
        self.nvml = self.handle = None
        self.limit_watts = 0.0
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0".encode()
        handle, limit_mw = ctypes.c_void_p(), ctypes.c_uint()
        if (nvml.nvmlInit_v2() != NVML_SUCCESS
                or nvml.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(handle)) != NVML_SUCCESS
                or nvml.nvmlDeviceGetEnforcedPowerLimit(handle, ctypes.byref(limit_mw)) != NVML_SUCCESS):
            return
        self.nvml, self.handle, self.limit_watts = nvml, handle, limit_mw.value / 1000
        self.samples = []
        self.running = False

    def _sample(self):
        clock, power_mw = ctypes.c_uint(), ctypes.c_uint()
        while self.running:
            if (self.nvml.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(clock)) == NVML_SUCCESS
                    and self.nvml.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(power_mw)) == NVML_SUCCESS):
                self.samples.append((clock.value, power_mw.value / 1000))
            time.sleep(0.02)

    def __enter__(self):
        if self.nvml:
            self.running = True
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.nvml:
            self.running = False
            self.thread.join()

    def report(self):
        """' | SM clock X MHz, Y W of Z W', or '' without NVML or samples."""
        if not self.nvml or not self.samples:
            return ""
        mhz = sum(c for c, _ in self.samples) / len(self.samples)
        watts = sum(w for _, w in self.samples) / len(self.samples)
        return f" | SM clock {mhz:.0f} MHz, {watts:.0f} W of {self.limit_watts:.0f} W"
