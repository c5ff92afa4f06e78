#include "amber/train/device_peaks.h"

#include <sstream>
#include <vector>

#include "amber/core/cuda_runtime.h"

namespace amber {
namespace {

struct KnownCard {
  const char* name_part;  // matched as a substring of the device name; the first match wins
  double tflops;
};

// Vendor data sheets' dense bf16 tensor-core peaks. Variants come before the name
// they contain ("H100 PCIe" before "H100", "L40S" before "L40").
const std::vector<KnownCard>& known_cards() {
  static const std::vector<KnownCard> cards = {
      {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H200 NVL", 835}, {"H100", 989}, {"H200", 989},
      {"H800", 989},      {"A100", 312},     {"A800", 312},     {"B200", 2250}, {"L40S", 362},
  };
  return cards;
}

}  // namespace

double known_peak_tflops(const std::string& name) {
  for (const KnownCard& card : known_cards())
    if (name.find(card.name_part) != std::string::npos) return card.tflops;
  return 0;
}

MfuPeak mfu_peak(const TrainConfig& train, Device device) {
  std::ostringstream note;
  if (train.peak_tflops > 0) {
    note << "MFU against " << train.peak_tflops << " TFLOP/s (train.peak_tflops)";
    return {train.peak_tflops, note.str()};
  }
  if (!device.is_cuda()) return {0, "MFU not reported: no stated peak for the CPU (set train.peak_tflops to report it)"};
  const std::string name = cuda::device_name(device.index);
  if (train.compute_dtype == "f32")
    return {0, "MFU not reported: the table's peaks are bf16/f16 tensor-core rates and this run computes in f32 "
               "(set train.peak_tflops to report it)"};
  const double tflops = known_peak_tflops(name);
  if (tflops == 0) {
    note << "MFU not reported: no known peak for " << name << " (set train.peak_tflops to report it)";
    return {0, note.str()};
  }
  note << "MFU against " << tflops << " TFLOP/s, the stated dense bf16 peak of " << name
       << " (train.peak_tflops overrides)";
  return {tflops, note.str()};
}

}  // namespace amber
