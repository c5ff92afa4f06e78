// The peak MFU is measured against: the config's when set, else a known card's stated
// dense bf16 peak, matched on the driver's name; none on the CPU, and the header says why.
#include <gtest/gtest.h>

#include "amber/train/device_peaks.h"

namespace amber {
namespace {

TEST(DevicePeaks, KnownCardsAreMatchedOnTheirDriverNames) {
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(known_peak_tflops("NVIDIA H200"), 989);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(known_peak_tflops("NVIDIA H100 NVL"), 835);
  EXPECT_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(known_peak_tflops("NVIDIA L40S"), 362);
  EXPECT_EQ(known_peak_tflops("NVIDIA GeForce GTX 1080"), 0);
}

TEST(DevicePeaks, TheConfigsPeakWinsAndTheCpuHasNone) {
  TrainConfig t;
  const MfuPeak cpu = mfu_peak(t, Device::cpu());
  EXPECT_EQ(cpu.tflops, 0);
  EXPECT_NE(cpu.note.find("MFU not reported"), std::string::npos) << cpu.note;
  EXPECT_NE(cpu.note.find("train.peak_tflops"), std::string::npos) << cpu.note;
  t.peak_tflops = 123;
  const MfuPeak set = mfu_peak(t, Device::cpu());
  EXPECT_EQ(set.tflops, 123);
  EXPECT_NE(set.note.find("train.peak_tflops"), std::string::npos) << set.note;
}

}  // namespace
}  // namespace amber
