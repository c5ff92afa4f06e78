// The block-scaled FP8 product of ops/fp8_gemm.h: the CPU oracle against a plain
// float64 sum over the dequantized operands (K tails, both scalings of b, alpha, beta), the
// scale layouts the GPU reads, shape errors, and (Fp8GemmGpu) cuBLASLt's product against
// the oracle on fresh inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "amber/core/error.h"
#include "amber/ops/fp8_gemm.h"
#include "amber/ops/quant.h"
#include "testing.h"

namespace amber {
namespace {

Device gpu_device() { return Device::cuda(); }

// An operand [rows, k] quantized as `scaling` says, its scales in the GPU's layout.
struct Operand {
  Tensor values, scales, storage;
};
Operand quantized(const Tensor& x, Fp8Scaling scaling) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Operand o{Tensor::empty(x.shape(), DType::f8e4m3, x.device()), Tensor(),
            Tensor::empty(fp8_gemm_scales_storage(scaling, rows, cols), DType::f32, x.device())};
  o.scales = fp8_gemm_scales(scaling, o.storage, rows, cols);
  if (scaling == Fp8Scaling::rows)
    quantize_fp8_rows(x, o.values, o.scales);
  else
    quantize_fp8_blocks(x, o.values, o.scales);
  return o;
}

std::vector<double> dequantized(const Operand& o, Fp8Scaling scaling) {
  Tensor out = Tensor::empty(o.values.shape(), DType::f64);
  if (scaling == Fp8Scaling::rows)
    dequantize_fp8_rows(o.values, o.scales, out);
  else
    dequantize_fp8_blocks(o.values, o.scales, out);
  return out.to_doubles();
}

TEST(Fp8Gemm, OracleIsTheFloat64ProductOfTheDequantizedOperands) {
  const int64_t m = 37, n = 150, k = 300;  // k: two whole blocks and a tail of 44
  const Tensor x = testing::random_tensor({m, k}, DType::bf16, 1);
  const Tensor w = testing::random_tensor({n, k}, DType::bf16, 2, 0.05f);
  const Operand a = quantized(x, Fp8Scaling::rows);
  const std::vector<double> da = dequantized(a, Fp8Scaling::rows);
  for (Fp8Scaling scaling : {Fp8Scaling::rows, Fp8Scaling::tiles}) {
    const Operand b = quantized(w, scaling);
    const std::vector<double> db = dequantized(b, scaling);
    const Tensor before = testing::random_tensor({m, n}, DType::f64, 3);
    for (double beta : {0.0, 1.0}) {
      Tensor c = before.clone();
      gemm_fp8(a.values, a.scales, b.values, b.scales, scaling, c, 0.5, beta);
      const std::vector<double> got = c.to_doubles(), c0 = before.to_doubles();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t q = 0; q < k; ++q)
            dot += da[static_cast<size_t>(i * k + q)] * db[static_cast<size_t>(j * k + q)];
          const double sum = 0.5 * dot + beta * c0[static_cast<size_t>(i * n + j)];
          ASSERT_NEAR(got[static_cast<size_t>(i * n + j)], sum, 1e-12 * (1.0 + std::fabs(sum)))
              << "element (" << i << ", " << j << "), beta " << beta;
        }
    }
  }
}

TEST(Fp8Gemm, ScaleLayoutsAreThoseTheGpuReads) {
  EXPECT_EQ(fp8_gemm_scales_storage(Fp8Scaling::rows, 300, 260), (Shape{3, 300}));
  EXPECT_EQ(fp8_gemm_scales_storage(Fp8Scaling::tiles, 300, 1280), (Shape{3, 12}));  // 10 blocks, padded to 12
  const Tensor rows = fp8_gemm_scales(Fp8Scaling::rows, Tensor::empty({3, 300}, DType::f32), 300, 260);
  EXPECT_EQ(rows.shape(), (Shape{300, 3}));
  EXPECT_EQ(rows.stride(0), 1);
  EXPECT_EQ(rows.stride(1), 300);
  const Tensor tiles = fp8_gemm_scales(Fp8Scaling::tiles, Tensor::empty({3, 12}, DType::f32), 300, 1280);
  EXPECT_EQ(tiles.shape(), (Shape{3, 10}));
  EXPECT_EQ(tiles.stride(0), 12);
  EXPECT_THROW(fp8_gemm_scales(Fp8Scaling::tiles, Tensor::empty({3, 10}, DType::f32), 300, 1280), Error);
}

TEST(Fp8Gemm, MismatchedOperandsNameWhatIsWrong) {
  const Operand a = quantized(testing::random_tensor({4, 256}, DType::f32, 1), Fp8Scaling::rows);
  const Operand b = quantized(testing::random_tensor({8, 128}, DType::f32, 2), Fp8Scaling::rows);
  Tensor c = Tensor::empty({4, 8}, DType::f32);
  try {
    gemm_fp8(a.values, a.scales, b.values, b.scales, Fp8Scaling::rows, c);
    FAIL() << "mismatched K accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_fp8: b [8, 128] must be [rows, 256]"), std::string::npos) << e.what();
  }
  const Operand b2 = quantized(testing::random_tensor({8, 256}, DType::f32, 2), Fp8Scaling::rows);
  try {
    gemm_fp8(a.values, a.scales, b2.values, b2.scales, Fp8Scaling::tiles, c);
    FAIL() << "row scales taken for tiles";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b's scales [8, 2] f32 must be f32 [1, 2] (one per 128x128 tile)"),
              std::string::npos)
        << e.what();
  }
}

// ---- GPU against the CPU ----------------------------------------------------------------

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

Operand on_gpu(const Operand& o, Fp8Scaling scaling, int64_t rows, int64_t cols) {
  Operand g{o.values.to(gpu_device()), Tensor(), o.storage.to(gpu_device())};
  g.scales = fp8_gemm_scales(scaling, g.storage, rows, cols);
  return g;
}

// cuBLASLt's block-scaled products (forward and input-gradient shapes with tiles,
// weight-gradient shapes with rows on both sides, K tails) against the oracle. Hopper's
// FP8 products accumulate with less than fp32's precision inside each 128-wide k block
// (docs/numerics.md): f32 outputs measured 0.8e-4 to 1.3e-4 relative (Frobenius) off the
// float64 product, the largest element 1.3e-3 of its row's rms; bf16 outputs add their
// rounding (1.7e-3, 1.6e-2). The bounds leave about twice that.
TEST(Fp8GemmGpu, BlockScaledProductsMatchTheOracle) {
  REQUIRE_GPU();
  struct Case {
    int64_t m, n, k;
    Fp8Scaling b;
  };
  for (const Case& s : std::vector<Case>{{256, 384, 512, Fp8Scaling::tiles},
                                         {208, 144, 320, Fp8Scaling::tiles},
                                         {1024, 1536, 1280, Fp8Scaling::tiles},
                                         {384, 256, 1024, Fp8Scaling::rows},
                                         {144, 208, 320, Fp8Scaling::rows}}) {
    const std::string what = concat(s.m, "x", s.n, "x", s.k, s.b == Fp8Scaling::rows ? " rows" : " tiles");
    const Tensor x = testing::random_tensor({s.m, s.k}, DType::bf16, s.m + s.k);
    const Tensor w = testing::random_tensor({s.n, s.k}, DType::bf16, s.n + s.k, 0.05f);
    const Operand a = quantized(x, Fp8Scaling::rows), b = quantized(w, s.b);
    const Operand ga = on_gpu(a, Fp8Scaling::rows, s.m, s.k), gb = on_gpu(b, s.b, s.n, s.k);
    const Tensor before = testing::random_tensor({s.m, s.n}, DType::f32, 9);
    for (DType out : {DType::f32, DType::bf16})
      for (double beta : {0.0, 1.0}) {
        if (out == DType::bf16 && beta != 0.0) continue;
        Tensor want = before.to(out).to(DType::f64);
        const double alpha = beta == 0.0 ? 1.0 : 0.5;  // the residual add's form
        gemm_fp8(a.values, a.scales, b.values, b.scales, s.b, want, alpha, beta);
        Tensor got = before.to(out).to(gpu_device());
        try {
          gemm_fp8(ga.values, ga.scales, gb.values, gb.scales, s.b, got, alpha, beta);
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": " << e.what();
          continue;
        }
        const std::vector<double> g = got.to(Device::cpu()).to_doubles(), c = want.to_doubles();
        double worst = 0, num = 0, den = 0;
        for (int64_t i = 0; i < s.m; ++i) {
          double rms = 0;
          for (int64_t j = 0; j < s.n; ++j) rms += c[static_cast<size_t>(i * s.n + j)] * c[static_cast<size_t>(i * s.n + j)];
          rms = std::sqrt(rms / static_cast<double>(s.n)) + 1e-30;
          for (int64_t j = 0; j < s.n; ++j) {
            const double e = std::fabs(g[static_cast<size_t>(i * s.n + j)] - c[static_cast<size_t>(i * s.n + j)]);
            worst = std::max(worst, e / rms);
            num += e * e;
            den += c[static_cast<size_t>(i * s.n + j)] * c[static_cast<size_t>(i * s.n + j)];
          }
        }
        std::cout << what << " -> " << dtype_name(out) << ", beta " << beta << ": relative error "
                  << std::sqrt(num / den) << ", largest over its row's rms " << worst << "\n";
        const bool f32 = out == DType::f32;
        EXPECT_LE(std::sqrt(num / den), f32 ? 3e-4 : 3e-3) << what << " -> " << dtype_name(out);
        EXPECT_LE(worst, f32 ? 3e-3 : 3e-2) << what << " -> " << dtype_name(out);
      }
  }
}

// Shapes cuBLASLt refuses are named before it is asked.
TEST(Fp8GemmGpu, RowsNotAMultipleOf16AreRefusedWithTheShape) {
  REQUIRE_GPU();
  const Operand a = quantized(testing::random_tensor({130, 256}, DType::f32, 1), Fp8Scaling::rows);
  const Operand b = quantized(testing::random_tensor({200, 256}, DType::f32, 2), Fp8Scaling::rows);
  const Operand ga = on_gpu(a, Fp8Scaling::rows, 130, 256), gb = on_gpu(b, Fp8Scaling::rows, 200, 256);
  Tensor c = Tensor::empty({130, 200}, DType::f32, gpu_device());
  try {
    gemm_fp8(ga.values, ga.scales, gb.values, gb.scales, Fp8Scaling::rows, c);
    FAIL() << "130 x 200 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("M = 130 and N = 200 must be multiples of 16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace amber
