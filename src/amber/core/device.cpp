#include "amber/core/device.h"

#include "amber/core/cuda_runtime.h"
#include "amber/core/error.h"

namespace amber {

std::ostream& operator<<(std::ostream& out, Device device) {
  if (device.is_cpu()) return out << "cpu";
  return out << "cuda:" << device.index;
}

Device device_from_name(const std::string& name) {
  if (name == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0) {
    const std::string index = name.substr(5);
    AMBER_CHECK(!index.empty() && index.find_first_not_of("0123456789") == std::string::npos,
                "bad device '", name, "': use auto, cpu, cuda or cuda:N");
    return Device::cuda(std::stoi(index));
  }
  fail("bad device '", name, "': use auto, cpu, cuda or cuda:N");
}

bool cuda_available() {
#ifdef AMBER_WITH_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

}  // namespace amber
