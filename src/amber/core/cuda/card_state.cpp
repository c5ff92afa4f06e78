// start_card_sampling / stop_card_sampling (core/cuda_runtime.h) through NVML, which
// ships with the driver, not the toolkit: it is opened with dlopen and its few entry
// points declared here (their C signatures, stable since NVML's first versions), so a
// build machine without a driver needs nothing and a card without NVML reports nothing.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <type_traits>

#include "amber/core/cuda_runtime.h"
#include "amber/core/error.h"

namespace amber::cuda {
namespace {

using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlSuccess = 0, kNvmlClockSm = 1;

struct Nvml {
  int (*init)() = nullptr;
  int (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  int (*power_usage)(NvmlDevice, unsigned*) = nullptr;
  int (*enforced_power_limit)(NvmlDevice, unsigned*) = nullptr;
  bool ready = false;

  // Opened once per process; false when the library or an entry point is missing or
  // NVML does not start.
  static const Nvml& get() {
    static const Nvml nvml = [] {
      Nvml n;
      void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib) return n;
      const auto bind = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
        return fn != nullptr;
      };
      n.ready = bind(n.init, "nvmlInit_v2") && bind(n.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") &&
                bind(n.clock_info, "nvmlDeviceGetClockInfo") && bind(n.power_usage, "nvmlDeviceGetPowerUsage") &&
                bind(n.enforced_power_limit, "nvmlDeviceGetEnforcedPowerLimit") && n.init() == kNvmlSuccess;
      return n;
    }();
    return nvml;
  }
};

struct Sampling {
  std::mutex mutex;  // start and stop from different threads stay ordered
  std::thread thread;
  std::atomic<bool> running{false};
  CardState state;
};

Sampling& sampling() {
  static Sampling s;
  return s;
}

// The NVML handle of CUDA device `device`, matched by PCI bus id (NVML's own order need
// not be CUDA's, for instance under CUDA_VISIBLE_DEVICES).
bool nvml_device(const Nvml& nvml, int device, NvmlDevice* out) {
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) != cudaSuccess) return false;
  return nvml.handle_by_pci_bus_id(bus_id, out) == kNvmlSuccess;
}

}  // namespace

void start_card_sampling(int device) {
  Sampling& s = sampling();
  std::lock_guard<std::mutex> lock(s.mutex);
  AMBER_CHECK(!s.running, "card sampling: one is already running; stop it first");
  s.state = CardState{};
  const Nvml& nvml = Nvml::get();
  NvmlDevice handle = nullptr;
  if (!nvml.ready || !nvml_device(nvml, device, &handle)) return;
  unsigned limit_mw = 0;
  if (nvml.enforced_power_limit(handle, &limit_mw) != kNvmlSuccess) return;
  s.state.available = true;
  s.state.limit_watts = limit_mw / 1000.0;
  s.running = true;
  s.thread = std::thread([&s, &nvml, handle] {
    double mhz = 0, watts = 0;
    int n = 0;
    while (s.running) {
      unsigned clock = 0, power_mw = 0;
      if (nvml.clock_info(handle, kNvmlClockSm, &clock) == kNvmlSuccess &&
          nvml.power_usage(handle, &power_mw) == kNvmlSuccess) {
        mhz += clock;
        watts += power_mw / 1000.0;
        ++n;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    s.state.samples = n;
    s.state.sm_mhz = n ? mhz / n : 0;
    s.state.watts = n ? watts / n : 0;
  });
}

CardState stop_card_sampling() {
  Sampling& s = sampling();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.running) {
    s.running = false;
    s.thread.join();
  }
  CardState out = s.state;
  if (out.available && out.samples == 0) out.available = false;  // stopped before a sample landed
  s.state = CardState{};
  return out;
}

}  // namespace amber::cuda
