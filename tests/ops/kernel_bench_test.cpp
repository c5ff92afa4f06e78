// `amber bench kernel`'s bookkeeping on the CPU: which rows each kernel name times,
// the fewest bytes each row must move (what its TB/s and share of the copy bandwidth
// are computed from), and the errors for names and shapes it cannot run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "amber/core/error.h"
#include "bench/kernel_bench.h"

namespace amber {
namespace {

std::vector<std::string> names(const KernelBenchResult& r) {
  std::vector<std::string> out;
  for (const KernelBenchRow& row : r.rows) out.push_back(row.name);
  return out;
}

// The FP8 quantizers: bf16 read once, e4m3 codes written once per layout, fp32 scales
// one per 128-block of a rows layout (none counted for the tiles', 1/16384 of them);
// the SwiGLU backward's rows read dh and gate_up and write dgate_up's two layouts.
TEST(KernelBench, QuantTimesEveryQuantizerLayoutWithItsBytes) {
  const int64_t tokens = 64, width = 256;
  const KernelBenchResult r = run_kernel_bench("quant", Device::cpu(), tokens, width, 1);
  const std::vector<std::string> expected = {
      "fp8 rows (1x128 blocks)", "fp8 columns (1x128 blocks of x^T)", "fp8 rows and columns, one pass",
      "fp8 rows, then columns (two passes)", "fp8 128x128 tiles and their transpose",
      "swiglu backward into fp8 rows and columns, one pass", "swiglu backward, then fp8 rows and columns (two passes)"};
  ASSERT_EQ(names(r), expected);
  const double elements = tokens * width, source = 2 * elements, codes = elements, scales = 4 * elements / 128;
  const double bytes[] = {source + codes + scales, source + codes + scales, source + 2 * (codes + scales),
                          source + 2 * (codes + scales), source + 2 * codes,
                          // dh and gate_up read, dgate_up's rows and columns written
                          3 * source + 4 * (codes + scales), 3 * source + 4 * (codes + scales)};
  EXPECT_GT(r.copy_tb_per_s, 0);
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const KernelBenchRow& row = r.rows[i];
    EXPECT_EQ(row.shape, "64 x 256 bf16");
    EXPECT_DOUBLE_EQ(row.bytes, bytes[i]) << row.name;
    EXPECT_GT(row.ms, 0) << row.name;
    EXPECT_DOUBLE_EQ(row.tb_per_s, row.bytes / (row.ms * 1e-3) / 1e12) << row.name;
    EXPECT_DOUBLE_EQ(row.of_copy, row.tb_per_s / r.copy_tb_per_s) << row.name;
  }
}

TEST(KernelBench, AllRunsEveryKernelsRows) {
  const KernelBenchResult all = run_kernel_bench("all", Device::cpu(), 32, 256, 1);
  size_t each = 0;
  for (const char* name : {"rmsnorm", "swiglu", "rope", "quant"}) {
    const KernelBenchResult one = run_kernel_bench(name, Device::cpu(), 32, 256, 1);
    EXPECT_FALSE(one.rows.empty()) << name;
    for (size_t i = 0; i < one.rows.size(); ++i) EXPECT_EQ(all.rows.at(each + i).name, one.rows[i].name) << name;
    each += one.rows.size();
  }
  EXPECT_EQ(all.rows.size(), each);
}

TEST(KernelBench, RefusesUnknownNamesAndWidths) {
  const auto message = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { run_kernel_bench("qaunt", Device::cpu(), 64, 256, 1); })
                .find("unknown kernel 'qaunt'; valid: rmsnorm, swiglu, rope, quant, all"),
            std::string::npos);
  EXPECT_NE(message([] { run_kernel_bench("quant", Device::cpu(), 64, 200, 1); })
                .find("width must be a positive multiple of 128"),
            std::string::npos);
}

}  // namespace
}  // namespace amber
