// Where a tensor lives. The device is the only runtime switch inside an op.
#pragma once

#include <ostream>
#include <string>

namespace amber {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device&) const = default;
};

std::ostream& operator<<(std::ostream& out, Device device);
// "cpu", "cuda", "cuda:1", or "auto": the first GPU when one is visible, else the CPU.
Device device_from_name(const std::string& name);
bool cuda_available();                             // built with CUDA and a device present

}  // namespace amber
