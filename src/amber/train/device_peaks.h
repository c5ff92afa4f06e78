// The peak a run's MFU is measured against: train.peak_tflops when set, else the
// stated dense bf16/f16 tensor-core peak of the GPU the run trains on, from a small
// table of known cards matched on the driver's device name. Without either (the CPU,
// an f32 run, a card the table lacks) no MFU is reported, and the run header says why.
#pragma once

#include <string>

#include "amber/core/device.h"
#include "amber/train/run_config.h"

namespace amber {

// The stated dense (not 2:4 sparse) bf16 peak in TFLOP/s of the card named `name`
// ("NVIDIA H100 80GB HBM3"), or 0 when the table does not know it.
double known_peak_tflops(const std::string& name);

struct MfuPeak {
  double tflops = 0;  // 0: no MFU
  std::string note;   // where the peak comes from, or why there is none, for the run header
};

MfuPeak mfu_peak(const TrainConfig& train, Device device);

}  // namespace amber
