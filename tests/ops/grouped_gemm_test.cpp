// Grouped products (ops/grouped_gemm.h): the CPU path against per-expert float64 loops
// and finite differences, malformed offsets named, and the Hopper kernels against the
// float64 oracle on ragged groups (empty experts, one-row experts, rows and widths off
// the tiles, reduction tails), with their epilogues, the store partition's A/B giving
// one result, and a graph captured once replaying any routing bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <vector>

#include "amber/core/cuda_runtime.h"
#include "amber/ops/grouped_gemm.h"
#include "amber/ops/quant.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;

Tensor offsets_of(const std::vector<int>& counts) {
  std::vector<int32_t> o(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) o[e + 1] = o[e] + counts[e];
  return Tensor::from_vector(o, {static_cast<int64_t>(o.size())});
}

int total(const std::vector<int>& counts) { return std::accumulate(counts.begin(), counts.end(), 0); }

// y[r] = scale[r] * sum_k x[r, k] w[e(r), n, k] in float64, independent of the op.
std::vector<double> reference_forward(const Tensor& x, const Tensor& w, const std::vector<int>& counts,
                                      const std::vector<double>& scale = {}) {
  const std::vector<double> xs = x.to_doubles(), ws = w.to_doubles();
  const int64_t k = x.size(1), n = w.size(1);
  std::vector<double> y(static_cast<size_t>(x.size(0) * n), 0.0);
  int64_t row = 0;
  for (size_t e = 0; e < counts.size(); ++e)
    for (int c = 0; c < counts[e]; ++c, ++row)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += xs[row * k + i] * ws[(e * n + j) * k + i];
        y[row * n + j] = s * (scale.empty() ? 1.0 : scale[row]);
      }
  return y;
}

TEST(GroupedGemm, ForwardMatchesPerExpertFloat64Loops) {
  const std::vector<int> counts = {3, 0, 1, 7, 0, 2};
  const int rows = total(counts) + 2;  // two rows past the last expert
  const Tensor x = random_tensor({rows, 5}, DType::f64, 1), w = random_tensor({6, 4, 5}, DType::f64, 2);
  const Tensor scale = random_tensor({rows}, DType::f32, 3);
  const std::vector<double> scale_values = scale.to_doubles();
  Tensor y = Tensor::full({rows, 4}, 7.0, DType::f64), ys = Tensor::full({rows, 4}, 7.0, DType::f64);
  grouped_gemm_forward(x, w, offsets_of(counts), y);
  grouped_gemm_forward(x, w, offsets_of(counts), ys, scale);
  const std::vector<double> ref = reference_forward(x, w, counts), refs = reference_forward(x, w, counts, scale_values);
  const std::vector<double> got = y.to_doubles(), gots = ys.to_doubles();
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < 4; ++j) {
      const size_t i = static_cast<size_t>(r * 4 + j);
      if (r >= total(counts)) {
        EXPECT_EQ(got[i], 7.0) << "row " << r << " lies past the last expert and must stay untouched";
        continue;
      }
      EXPECT_NEAR(got[i], ref[i], 1e-12) << "row " << r << " col " << j;
      EXPECT_NEAR(gots[i], refs[i], 1e-12) << "scaled row " << r << " col " << j;
    }
}

// d/dx and d/dw of sum(g * y) are the input and weight gradients.
TEST(GroupedGemm, BackwardMatchesFiniteDifferences) {
  const std::vector<int> counts = {2, 0, 3, 1};
  const Tensor offsets = offsets_of(counts);
  Tensor x = random_tensor({6, 5}, DType::f64, 4), w = random_tensor({4, 3, 5}, DType::f64, 5);
  const Tensor g = random_tensor({6, 3}, DType::f64, 6);
  const auto loss = [&] {
    Tensor y = Tensor::zeros({6, 3}, DType::f64);
    grouped_gemm_forward(x, w, offsets, y);
    const std::vector<double> ys = y.to_doubles(), gs = g.to_doubles();
    return std::inner_product(ys.begin(), ys.end(), gs.begin(), 0.0);
  };
  Tensor dx = Tensor::zeros({6, 5}, DType::f64), dw = Tensor::full({4, 3, 5}, 3.0, DType::f64);
  grouped_gemm_backward_input(g, w, offsets, dx);
  grouped_gemm_backward_weight(g, x, offsets, dw, false);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss, 30), 1e-7);
  EXPECT_LT(testing::finite_difference_error(w, dw, loss, 60), 1e-7);
  // Expert 1 has no rows: its gradient is zero, or kept when accumulating.
  for (double v : dw.select(0, 1).to_doubles()) EXPECT_EQ(v, 0.0);
  Tensor again = dw.clone();
  grouped_gemm_backward_weight(g, x, offsets, again, true);
  const std::vector<double> once = dw.to_doubles(), twice = again.to_doubles();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
}

// squares [E, R, C] of dw [E, N, K] by its definition (ops/grouped_gemm.h): block (e, i,
// j) sums the squares of rows 16i .. 16i + 15 and columns 128j .. 128j + 127.
Tensor block_squares_of(const Tensor& dw, const Shape& shape) {
  const std::vector<double> v = dw.to_doubles();
  const int64_t n = dw.size(1), k = dw.size(2);
  Tensor out = Tensor::zeros(shape, DType::f64);
  for (int64_t e = 0; e < shape[0]; ++e)
    for (int64_t i = 0; i < shape[1]; ++i)
      for (int64_t j = 0; j < shape[2]; ++j) {
        double s = 0;
        for (int64_t r = 16 * i; r < std::min(n, 16 * i + 16); ++r)
          for (int64_t c = 128 * j; c < std::min(k, 128 * j + 128); ++c) s += v[(e * n + r) * k + c] * v[(e * n + r) * k + c];
        out.data<double>()[(e * shape[1] + i) * shape[2] + j] = s;
      }
  return out;
}

// The squares of the gradient's blocks, as written and as kept by an accumulating call
// that gives an expert no rows.
TEST(GroupedGemm, WeightGradientLeavesTheSquaresOfItsBlocks) {
  const Tensor x = random_tensor({9, 260}, DType::f32, 11), dy = random_tensor({9, 40}, DType::f32, 12);
  Tensor dw = Tensor::zeros({3, 40, 260}, DType::f32);
  EXPECT_EQ(grouped_weight_squares_shape(dw.shape()), Shape({3, 8, 3}));
  Tensor squares = Tensor::full({3, 8, 3}, NAN, DType::f64);
  grouped_gemm_backward_weight(dy, x, offsets_of({4, 0, 5}), dw, false, &squares);
  EXPECT_LT(testing::relative_error(squares, block_squares_of(dw, squares.shape())), 1e-12);
  grouped_gemm_backward_weight(dy, x, offsets_of({0, 9, 0}), dw, true, &squares);
  EXPECT_LT(testing::relative_error(squares, block_squares_of(dw, squares.shape())), 1e-12);
  Tensor wrong = Tensor::zeros({3, 8, 2}, DType::f64);
  EXPECT_THROW(grouped_gemm_backward_weight(dy, x, offsets_of({4, 0, 5}), dw, false, &wrong), Error);
}

TEST(GroupedGemm, SwigluForwardIsTheProductThenSwiglu) {
  const std::vector<int> counts = {4, 0, 2};
  const Tensor offsets = offsets_of(counts);
  const Tensor x = random_tensor({6, 8}, DType::f64, 7), w = random_tensor({3, 6, 8}, DType::f64, 8);
  Tensor gate_up = Tensor::zeros({6, 6}, DType::f64), h = Tensor::zeros({6, 3}, DType::f64);
  grouped_gemm_swiglu_forward(x, w, offsets, gate_up, h);
  const std::vector<double> ref = reference_forward(x, w, counts), gu = gate_up.to_doubles(), hs = h.to_doubles();
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 3; ++j) {
      const double gate = ref[r * 6 + j], up = ref[r * 6 + 3 + j];
      EXPECT_NEAR(gu[r * 6 + j], gate, 1e-12);
      EXPECT_NEAR(hs[r * 3 + j], gate / (1 + std::exp(-gate)) * up, 1e-12) << "row " << r << " col " << j;
    }
}

TEST(GroupedGemm, MalformedOffsetsAndShapesAreNamed) {
  const Tensor x = random_tensor({4, 8}, DType::f32, 9), w = random_tensor({2, 3, 8}, DType::f32, 10);
  Tensor y = Tensor::zeros({4, 3}, DType::f32);
  const auto message = [&](const Tensor& offsets, Tensor& out) {
    try {
      grouped_gemm_forward(x, w, offsets, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Tensor::from_vector(std::vector<int32_t>{0, 3, 2}, {3}), y).find("decrease at expert 1"),
            std::string::npos);
  EXPECT_NE(message(Tensor::from_vector(std::vector<int32_t>{0, 3, 5}, {3}), y).find("hold 4 rows"),
            std::string::npos);
  EXPECT_NE(message(Tensor::from_vector(std::vector<int32_t>{1, 3, 4}, {3}), y).find("offsets[0] is 1"),
            std::string::npos);
  EXPECT_NE(message(Tensor::from_vector(std::vector<int32_t>{0, 4}, {2}), y).find("must be i32 [3]"),
            std::string::npos);
  Tensor wrong = Tensor::zeros({4, 2}, DType::f32);
  EXPECT_NE(message(offsets_of({2, 2}), wrong).find("must be [4, 3]"), std::string::npos);
}

// FP8 operands as ops/quant.h makes them.
struct Fp8Operands {
  Tensor x, x_scales, w, w_scales;
};
Fp8Operands quantized(const Tensor& x, const Tensor& w) {
  Fp8Operands q{Tensor::empty(x.shape(), DType::f8e4m3), Tensor::empty(fp8_rows_scales_shape(x.shape()), DType::f32),
                Tensor::empty(w.shape(), DType::f8e4m3), Tensor::empty(fp8_blocks_scales_shape(w.shape()), DType::f32)};
  quantize_fp8_rows(x, q.x, q.x_scales);
  quantize_fp8_blocks(w, q.w, q.w_scales);
  return q;
}

// The CPU's FP8 products are the float64 products of the dequantized operands.
TEST(GroupedGemm, Fp8OracleIsTheProductOfDequantizedOperands) {
  const std::vector<int> counts = {3, 0, 5};
  const Tensor x = random_tensor({8, 160}, DType::f32, 20), w = random_tensor({3, 130, 160}, DType::f32, 21);
  const Fp8Operands q = quantized(x, w);
  Tensor xd = Tensor::empty(x.shape(), DType::f64), wd = Tensor::empty(w.shape(), DType::f64);
  dequantize_fp8_rows(q.x, q.x_scales, xd);
  dequantize_fp8_blocks(q.w, q.w_scales, wd);
  const std::vector<double> ref = reference_forward(xd, wd, counts);
  Tensor y = Tensor::zeros({8, 130}, DType::f64);
  grouped_gemm_forward_fp8(q.x, q.x_scales, q.w, q.w_scales, offsets_of(counts), y);
  const std::vector<double> got = y.to_doubles();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-12 * (1 + std::fabs(ref[i]))) << i;
  // The quantization itself stays within e4m3's rounding of the bf16/f32 product.
  EXPECT_LT(testing::relative_error(y, Tensor::from_vector(reference_forward(x.to(DType::f64), w.to(DType::f64), counts), {8, 130})), 0.05);
}

// The MXFP4 forms on the CPU are the products of the dequantized weights; malformed
// codes are refused by name.
TEST(GroupedGemm, Mxfp4OracleIsTheProductOfDequantizedWeights) {
  const std::vector<int> counts = {3, 0, 2};
  const Tensor offsets = offsets_of(counts);
  const Tensor x = random_tensor({5, 64}, DType::f64, 31), w = random_tensor({3, 4, 64}, DType::f64, 32);
  Tensor codes = Tensor::empty(mxfp4_values_shape(w.shape()), DType::u8);
  Tensor scales = Tensor::empty(mx_scales_shape(w.shape()), DType::e8m0);
  quantize_mxfp4(w.to(DType::f32), codes, scales);
  Tensor wd = Tensor::empty(w.shape(), DType::f64);
  dequantize_mxfp4(codes, scales, wd);
  Tensor want = Tensor::zeros({5, 4}, DType::f64), got = Tensor::zeros({5, 4}, DType::f64);
  grouped_gemm_forward(x, wd, offsets, want);
  grouped_gemm_forward_mxfp4(x, codes, scales, offsets, got);
  EXPECT_EQ(got.to_doubles(), want.to_doubles());
  Tensor want_gu = Tensor::zeros({5, 4}, DType::f64), want_h = Tensor::zeros({5, 2}, DType::f64);
  Tensor gu = Tensor::zeros({5, 4}, DType::f64), h = Tensor::zeros({5, 2}, DType::f64);
  grouped_gemm_swiglu_forward(x, wd, offsets, want_gu, want_h);
  grouped_gemm_swiglu_forward_mxfp4(x, codes, scales, offsets, gu, h);
  EXPECT_EQ(h.to_doubles(), want_h.to_doubles());
  EXPECT_EQ(gu.to_doubles(), want_gu.to_doubles());
  const Tensor short_codes = Tensor::empty({3, 4, 16}, DType::u8);
  try {
    grouped_gemm_forward_mxfp4(x, short_codes, scales, offsets, got);
    ADD_FAILURE() << "codes of the wrong shape were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("codes [3, 4, 16]"), std::string::npos) << e.what();
  }
}

TEST(GroupedGemm, VariantsTakeOnlyTheTileWidthsTheKernelsHave) {
  try {
    set_grouped_gemm_variant({.store_partition = true, .split_scales = true, .tile_n = 64});
    ADD_FAILURE() << "a 64-wide tile was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("128 or 256 columns wide"), std::string::npos) << e.what();
  }
  set_grouped_gemm_variant({});
}

// ---- GPU ---------------------------------------------------------------------------

#define REQUIRE_HOPPER()                                                                   \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";                                 \
  if (!grouped_gemm_available(Device::cuda())) GTEST_SKIP() << "the grouped kernels need an sm_90 card"

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }
Tensor nan_gpu(Shape shape, DType dt) { return gpu(Tensor::full(shape, NAN, dt)); }

// A routing's counts, with empty experts, one-row experts and counts off the tiles.
struct Case {
  std::vector<int> counts;
  int k, n, extra_rows;
};

// The GPU result's relative error against the f64 CPU op on the same (rounded) inputs;
// rows past the last expert must still hold the NaN they were poisoned with.
void expect_matches(const std::string& what, const Tensor& on_gpu, const Tensor& ref, int used_rows, double limit) {
  const Tensor got = on_gpu.to(Device::cpu());
  const int64_t rows = got.size(0);
  const double err = testing::relative_error(got.slice(0, 0, used_rows), ref.slice(0, 0, used_rows));
  std::cout << what << ": rel err " << err << "\n";
  EXPECT_LT(err, limit) << what;
  if (rows > used_rows) {
    for (double v : got.slice(0, used_rows, rows).to_doubles())
      ASSERT_TRUE(std::isnan(v)) << what << ": a row past the last expert was written";
  }
}

// The squares a GPU weight gradient left, against float64 sums over the same gradient's
// blocks: what differs is the fp32 sums of a block's squares within a thread.
void expect_block_squares(const std::string& what, const Tensor& dw, const Tensor& squares) {
  const Tensor got = squares.to(Device::cpu());
  const double err = testing::relative_error(got, block_squares_of(dw.to(Device::cpu()), got.shape()));
  std::cout << what << ": squares' rel err " << err << "\n";
  EXPECT_LT(err, 1e-6) << what << ": the squares of the gradient's blocks";
}

TEST(GroupedGemmGpu, ProductsMatchFloat64OnRaggedGroups) {
  REQUIRE_HOPPER();
  const std::vector<Case> cases = {
      {{0, 1, 130, 0, 257, 64, 1, 3}, 200, 144, 5},  // reduction and width tails
      {{5, 0, 300, 17}, 2880, 256, 0},               // gpt-oss's hidden size, K off 128
      {{129, 128, 0, 127}, 128, 128, 3},
      {{3, 0, 190, 1, 64}, 512, 144, 2},             // the weight gradient's 256-wide tiles (K % 256 == 0)
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    const int used = total(c.counts), rows = used + c.extra_rows, experts = static_cast<int>(c.counts.size());
    const std::string tag = "K " + std::to_string(c.k) + " N " + std::to_string(c.n);
    const Tensor offsets = offsets_of(c.counts), offsets_gpu = gpu(offsets);
    const Tensor x = random_tensor({rows, c.k}, DType::bf16, seed++), w = random_tensor({experts, c.n, c.k}, DType::bf16, seed++, 0.05f);
    const Tensor dy = random_tensor({rows, c.n}, DType::bf16, seed++);
    const Tensor scale = random_tensor({rows}, DType::f32, seed++);
    const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), dy64 = dy.to(DType::f64);

    Tensor ref = Tensor::zeros({rows, c.n}, DType::f64);
    grouped_gemm_forward(x64, w64, offsets, ref);
    Tensor y = nan_gpu({rows, c.n}, DType::bf16);
    grouped_gemm_forward(gpu(x), gpu(w), offsets_gpu, y);
    expect_matches("forward " + tag, y, ref, used, 5e-3);

    Tensor ref_scaled = Tensor::zeros({rows, c.n}, DType::f64);
    grouped_gemm_forward(x64, w64, offsets, ref_scaled, scale);
    Tensor ys = nan_gpu({rows, c.n}, DType::bf16);
    grouped_gemm_forward(gpu(x), gpu(w), offsets_gpu, ys, gpu(scale));
    expect_matches("forward, row scales " + tag, ys, ref_scaled, used, 5e-3);

    Tensor ref_gu = Tensor::zeros({rows, c.n}, DType::f64), ref_h = Tensor::zeros({rows, c.n / 2}, DType::f64);
    grouped_gemm_swiglu_forward(x64, w64, offsets, ref_gu, ref_h);
    Tensor gu = nan_gpu({rows, c.n}, DType::bf16), h = nan_gpu({rows, c.n / 2}, DType::bf16);
    grouped_gemm_swiglu_forward(gpu(x), gpu(w), offsets_gpu, gu, h);
    expect_matches("swiglu gate_up " + tag, gu, ref_gu, used, 5e-3);
    expect_matches("swiglu h " + tag, h, ref_h, used, 5e-3);
    Tensor unused, h_only = nan_gpu({rows, c.n / 2}, DType::bf16);
    grouped_gemm_swiglu_forward(gpu(x), gpu(w), offsets_gpu, unused, h_only);
    expect_matches("swiglu h without gate_up " + tag, h_only, ref_h, used, 5e-3);

    Tensor ref_dx = Tensor::zeros({rows, c.k}, DType::f64);
    grouped_gemm_backward_input(dy64, w64, offsets, ref_dx);
    Tensor dx = nan_gpu({rows, c.k}, DType::bf16);
    grouped_gemm_backward_input(gpu(dy), gpu(w), offsets_gpu, dx);
    expect_matches("backward input " + tag, dx, ref_dx, used, 5e-3);

    Tensor ref_dw = Tensor::zeros({experts, c.n, c.k}, DType::f64);
    grouped_gemm_backward_weight(dy64, x64, offsets, ref_dw, false);
    Tensor dw = nan_gpu({experts, c.n, c.k}, DType::f32);
    Tensor squares = nan_gpu(grouped_weight_squares_shape(dw.shape()), DType::f64);
    grouped_gemm_backward_weight(gpu(dy), gpu(x), offsets_gpu, dw, false, &squares);
    const double dw_err = testing::relative_error(dw.to(Device::cpu()), ref_dw);
    std::cout << "backward weight " << tag << ": rel err " << dw_err << "\n";
    EXPECT_LT(dw_err, 1e-5) << "fp32 accumulation of exact bf16 products";
    expect_block_squares("backward weight " + tag, dw, squares);
    grouped_gemm_backward_weight(gpu(dy), gpu(x), offsets_gpu, dw, true, &squares);
    Tensor twice = ref_dw.clone();
    grouped_gemm_backward_weight(dy64, x64, offsets, twice, true);
    EXPECT_LT(testing::relative_error(dw.to(Device::cpu()), twice), 1e-5) << "accumulated weight gradient";
    expect_block_squares("accumulated backward weight " + tag, dw, squares);
  }
}

// MXFP4-weight products against the float64 product of the bf16 activations and the
// dequantized weights: what is left is the fp32 accumulation and the bf16 output's
// rounding. Ragged experts (empty, one row, past 32 rows: several items), K of one scale
// block, gpt-oss's 2880 (half a 128-wide span at the end) and weights whose block
// scales pass 2^1 (the kernel's second scale factor).
TEST(GroupedGemmGpu, Mxfp4ProductsMatchTheDequantizedFloat64Oracle) {
  REQUIRE_HOPPER();
  const std::vector<std::pair<Case, float>> cases = {
      {{{0, 1, 130, 0, 257, 64, 1, 3}, 2880, 128, 5}, 0.05f},
      {{{5, 0, 70, 17}, 32, 192, 0}, 0.05f},
      {{{33, 2, 0, 40}, 160, 64, 3}, 40.0f},
  };
  uint64_t seed = 400;
  for (const auto& [c, weight_std] : cases) {
    const int used = total(c.counts), rows = used + c.extra_rows, experts = static_cast<int>(c.counts.size());
    const std::string tag = "K " + std::to_string(c.k) + " N " + std::to_string(c.n);
    const Tensor offsets = offsets_of(c.counts), offsets_gpu = gpu(offsets);
    const Tensor x = random_tensor({rows, c.k}, DType::bf16, seed++);
    const Tensor w = random_tensor({experts, c.n, c.k}, DType::f32, seed++, weight_std);
    const Tensor scale = random_tensor({rows}, DType::f32, seed++);
    Tensor codes = Tensor::empty(mxfp4_values_shape(w.shape()), DType::u8);
    Tensor scales = Tensor::empty(mx_scales_shape(w.shape()), DType::e8m0);
    quantize_mxfp4(w, codes, scales);
    const Tensor x64 = x.to(DType::f64), codes_gpu = gpu(codes), scales_gpu = gpu(scales);

    Tensor ref = Tensor::zeros({rows, c.n}, DType::f64);
    grouped_gemm_forward_mxfp4(x64, codes, scales, offsets, ref);
    Tensor y = nan_gpu({rows, c.n}, DType::bf16);
    grouped_gemm_forward_mxfp4(gpu(x), codes_gpu, scales_gpu, offsets_gpu, y);
    expect_matches("mxfp4 forward " + tag, y, ref, used, 5e-3);

    Tensor ref_scaled = Tensor::zeros({rows, c.n}, DType::f64);
    grouped_gemm_forward_mxfp4(x64, codes, scales, offsets, ref_scaled, scale);
    Tensor ys = nan_gpu({rows, c.n}, DType::bf16);
    grouped_gemm_forward_mxfp4(gpu(x), codes_gpu, scales_gpu, offsets_gpu, ys, gpu(scale));
    expect_matches("mxfp4 forward, row scales " + tag, ys, ref_scaled, used, 5e-3);

    Tensor ref_gu = Tensor::zeros({rows, c.n}, DType::f64), ref_h = Tensor::zeros({rows, c.n / 2}, DType::f64);
    grouped_gemm_swiglu_forward_mxfp4(x64, codes, scales, offsets, ref_gu, ref_h);
    Tensor gu = nan_gpu({rows, c.n}, DType::bf16), h = nan_gpu({rows, c.n / 2}, DType::bf16);
    grouped_gemm_swiglu_forward_mxfp4(gpu(x), codes_gpu, scales_gpu, offsets_gpu, gu, h);
    expect_matches("mxfp4 swiglu gate_up " + tag, gu, ref_gu, used, 5e-3);
    expect_matches("mxfp4 swiglu h " + tag, h, ref_h, used, 5e-3);
  }
}

// The input gradient's FP8 operand: w^T's codes, which quantize_fp8_blocks writes beside
// w's, read with w's scales through their transposed view (the MoE layer keeps both from
// its forward). On the CPU it is exactly dy times the dequantized w; on the GPU it
// matches that within the bf16 output's rounding.
TEST(GroupedGemmGpu, Fp8TransposedWeightsReadTheForwardScalesTransposed) {
  REQUIRE_HOPPER();
  const std::vector<int> counts = {0, 130, 1, 257};
  const int rows = total(counts), experts = static_cast<int>(counts.size()), n = 384, k = 320;
  const Tensor offsets = offsets_of(counts);
  const Tensor w = random_tensor({experts, n, k}, DType::bf16, 700, 0.05f);
  Tensor values = Tensor::empty(w.shape(), DType::f8e4m3, Device::cuda());
  Tensor scales = Tensor::empty(fp8_blocks_scales_shape(w.shape()), DType::f32, Device::cuda());
  Tensor values_t = Tensor::empty({experts, k, n}, DType::f8e4m3, Device::cuda());
  quantize_fp8_blocks(gpu(w), values, scales, &values_t);
  const Tensor dy = random_tensor({rows, n}, DType::bf16, 701);
  Tensor qdy = Tensor::empty(dy.shape(), DType::f8e4m3);
  Tensor qdys = Tensor::empty(fp8_rows_scales_shape(dy.shape()), DType::f32);
  quantize_fp8_rows(dy, qdy, qdys);
  const Tensor values_t_cpu = values_t.to(Device::cpu()), scales_cpu = scales.to(Device::cpu());

  Tensor ref = Tensor::zeros({rows, k}, DType::f64);
  grouped_gemm_forward_fp8(qdy, qdys, values_t_cpu, scales_cpu.transpose(1, 2), offsets, ref);
  Tensor dyd = Tensor::empty(dy.shape(), DType::f64), wd = Tensor::empty(w.shape(), DType::f64);
  dequantize_fp8_rows(qdy, qdys, dyd);
  dequantize_fp8_blocks(values.to(Device::cpu()), scales_cpu, wd);
  Tensor direct = Tensor::zeros({rows, k}, DType::f64);
  grouped_gemm_backward_input(dyd, wd, offsets, direct);
  EXPECT_LT(testing::relative_error(ref, direct), 1e-12);

  Tensor dx = nan_gpu({rows, k}, DType::bf16);
  grouped_gemm_forward_fp8(gpu(qdy), gpu(qdys), values_t, scales.transpose(1, 2), gpu(offsets), dx);
  expect_matches("fp8 input gradient through w^T", dx, ref, rows, 5e-3);
}

// FP8 products against the float64 product of the dequantized operands: what is left is
// the fp32 accumulation (promoted every 128 k) and the bf16 output's rounding.
TEST(GroupedGemmGpu, Fp8ProductsMatchTheDequantizedFloat64Oracle) {
  REQUIRE_HOPPER();
  const std::vector<Case> cases = {
      {{0, 1, 130, 0, 257, 64, 1, 3}, 208, 384, 5},
      {{5, 0, 300, 17}, 2880, 256, 0},
  };
  uint64_t seed = 400;
  for (const Case& c : cases) {
    const int used = total(c.counts), rows = used + c.extra_rows, experts = static_cast<int>(c.counts.size());
    const std::string tag = "K " + std::to_string(c.k) + " N " + std::to_string(c.n);
    const Tensor offsets = offsets_of(c.counts), offsets_gpu = gpu(offsets);
    const Tensor x = random_tensor({rows, c.k}, DType::bf16, seed++);
    const Fp8Operands q = quantized(x, random_tensor({experts, c.n, c.k}, DType::bf16, seed++, 0.05f));
    const Tensor scale = random_tensor({rows}, DType::f32, seed++);
    const Tensor qx = gpu(q.x), qxs = gpu(q.x_scales), qw = gpu(q.w), qws = gpu(q.w_scales);
    Tensor ref = Tensor::zeros({rows, c.n}, DType::f64), ref_scaled = Tensor::zeros({rows, c.n}, DType::f64);
    grouped_gemm_forward_fp8(q.x, q.x_scales, q.w, q.w_scales, offsets, ref);
    grouped_gemm_forward_fp8(q.x, q.x_scales, q.w, q.w_scales, offsets, ref_scaled, scale);
    Tensor ref_gu = Tensor::zeros({rows, c.n}, DType::f64), ref_h = Tensor::zeros({rows, c.n / 2}, DType::f64);
    grouped_gemm_swiglu_forward_fp8(q.x, q.x_scales, q.w, q.w_scales, offsets, ref_gu, ref_h);
    // Every scale loader, and the plain products' 256-wide tiles (N = 384: a tile half
    // past the experts' rows) beside the default choice.
    for (const auto& [split, tile_n] : {std::pair{true, 0}, std::pair{false, 0}, std::pair{true, 256}}) {
      set_grouped_gemm_variant({.store_partition = true, .split_scales = split, .tile_n = tile_n});
      const std::string v = tag + (split ? "" : ", loader-scales") + (tile_n == 256 ? ", 256 wide" : "");
      Tensor y = nan_gpu({rows, c.n}, DType::bf16), ys = nan_gpu({rows, c.n}, DType::bf16);
      grouped_gemm_forward_fp8(qx, qxs, qw, qws, offsets_gpu, y);
      expect_matches("fp8 forward " + v, y, ref, used, 5e-3);
      grouped_gemm_forward_fp8(qx, qxs, qw, qws, offsets_gpu, ys, gpu(scale));
      expect_matches("fp8 forward, row scales " + v, ys, ref_scaled, used, 5e-3);
      Tensor gu = nan_gpu({rows, c.n}, DType::bf16), h = nan_gpu({rows, c.n / 2}, DType::bf16);
      grouped_gemm_swiglu_forward_fp8(qx, qxs, qw, qws, offsets_gpu, gu, h);
      expect_matches("fp8 swiglu gate_up " + v, gu, ref_gu, used, 5e-3);
      expect_matches("fp8 swiglu h " + v, h, ref_h, used, 5e-3);
    }
    set_grouped_gemm_variant({});
  }
}

// The store partition only moves where results are written from, and a tile's width
// only which block computes an output: every variant gives one result.
TEST(GroupedGemmGpu, EveryKernelVariantGivesTheSameBits) {
  REQUIRE_HOPPER();
  const std::vector<int> counts = {70, 0, 1, 200};
  const int rows = total(counts);
  const Tensor offsets = gpu(offsets_of(counts));
  const Tensor x = gpu(random_tensor({rows, 192}, DType::bf16, 200)), w = gpu(random_tensor({4, 320, 192}, DType::bf16, 201));
  // SwiGLU halves of 256 columns: the 256-wide tiles take 128 of each; and halves of 192
  // (1.5 tiles, as gpt-oss's 2880 is 22.5), whose last 256-wide tile reads the next
  // half's weight rows into columns never stored.
  const Tensor w_glu = gpu(random_tensor({4, 512, 192}, DType::bf16, 203));
  const Tensor w_glu_odd = gpu(random_tensor({4, 384, 192}, DType::bf16, 204));
  const GroupedGemmVariant variants[4] = {{true, true, 128}, {false, true, 128}, {true, true, 256}, {false, true, 256}};
  Tensor y[4], gu[4], h[4], h_only[4], gu_odd[4], h_odd[4], dx[4], dw[4];
  const Tensor dy = gpu(random_tensor({rows, 320}, DType::bf16, 202));
  for (int variant = 0; variant < 4; ++variant) {
    set_grouped_gemm_variant(variants[variant]);
    y[variant] = Tensor::zeros({rows, 320}, DType::bf16, Device::cuda());
    gu[variant] = Tensor::zeros({rows, 512}, DType::bf16, Device::cuda());
    h[variant] = Tensor::zeros({rows, 256}, DType::bf16, Device::cuda());
    h_only[variant] = Tensor::zeros({rows, 256}, DType::bf16, Device::cuda());
    grouped_gemm_forward(x, w, offsets, y[variant]);
    grouped_gemm_swiglu_forward(x, w_glu, offsets, gu[variant], h[variant]);
    Tensor no_gate_up;
    grouped_gemm_swiglu_forward(x, w_glu, offsets, no_gate_up, h_only[variant]);
    gu_odd[variant] = Tensor::zeros({rows, 384}, DType::bf16, Device::cuda());
    h_odd[variant] = Tensor::zeros({rows, 192}, DType::bf16, Device::cuda());
    grouped_gemm_swiglu_forward(x, w_glu_odd, offsets, gu_odd[variant], h_odd[variant]);
    dx[variant] = Tensor::zeros({rows, 192}, DType::bf16, Device::cuda());
    grouped_gemm_backward_input(dy, w, offsets, dx[variant]);
    // K = 192: the forced 256-wide weight-gradient tile is partly past K.
    dw[variant] = Tensor::zeros({4, 320, 192}, DType::f32, Device::cuda());
    grouped_gemm_backward_weight(dy, x, offsets, dw[variant], false);
  }
  set_grouped_gemm_variant({});
  Tensor ref_gu = Tensor::zeros({rows, 384}, DType::f64), ref_h = Tensor::zeros({rows, 192}, DType::f64);
  grouped_gemm_swiglu_forward(x.to(Device::cpu()).to(DType::f64), w_glu_odd.to(Device::cpu()).to(DType::f64),
                              offsets_of(counts), ref_gu, ref_h);
  expect_matches("swiglu gate_up, halves of 192, 256 wide", gu_odd[2], ref_gu, rows, 5e-3);
  expect_matches("swiglu h, halves of 192, 256 wide", h_odd[2], ref_h, rows, 5e-3);
  for (int variant = 1; variant < 4; ++variant)
    for (const auto& [a, b] : {std::pair{y[0], y[variant]}, std::pair{gu[0], gu[variant]}, std::pair{h[0], h[variant]},
                               std::pair{h[0], h_only[variant]}, std::pair{gu_odd[0], gu_odd[variant]},
                               std::pair{h_odd[0], h_odd[variant]}, std::pair{dx[0], dx[variant]},
                               std::pair{dw[0], dw[variant]}})
      EXPECT_EQ(a.to(Device::cpu()).to_doubles(), b.to(Device::cpu()).to_doubles()) << "variant " << variant;
}

// One capture of every kernel, replayed with three routings written into the offsets
// buffer, matches eager calls on each routing bit for bit.
TEST(GroupedGemmGpu, CapturedGraphReplaysAnyRoutingBitForBit) {
  REQUIRE_HOPPER();
  const std::vector<std::vector<int>> routings = {{100, 0, 156, 0, 1, 255}, {0, 512, 0, 0, 0, 0}, {85, 85, 85, 85, 86, 86}};
  const int rows = 512, k = 256, n = 384, experts = 6;
  const Tensor x = gpu(random_tensor({rows, k}, DType::bf16, 300)), w = gpu(random_tensor({experts, n, k}, DType::bf16, 301));
  const Tensor dy = gpu(random_tensor({rows, n}, DType::bf16, 302)), scale = gpu(random_tensor({rows}, DType::f32, 303));
  Tensor offsets = Tensor::zeros({experts + 1}, DType::i32, Device::cuda());
  const Fp8Operands q = quantized(x.to(Device::cpu()), w.to(Device::cpu()));
  const Tensor qx = gpu(q.x), qxs = gpu(q.x_scales), qw = gpu(q.w), qws = gpu(q.w_scales);
  Tensor mx = Tensor::empty(mxfp4_values_shape(w.shape()), DType::u8);
  Tensor mx_scales = Tensor::empty(mx_scales_shape(w.shape()), DType::e8m0);
  quantize_mxfp4(w.to(Device::cpu()).to(DType::f32), mx, mx_scales);
  mx = gpu(mx), mx_scales = gpu(mx_scales);
  struct Outputs {
    Tensor y, h, gate_up, dx, dw, y8, y4, h4;
  };
  const auto make = [&] {
    return Outputs{Tensor::zeros({rows, n}, DType::bf16, Device::cuda()), Tensor::zeros({rows, n / 2}, DType::bf16, Device::cuda()),
                   Tensor::zeros({rows, n}, DType::bf16, Device::cuda()), Tensor::zeros({rows, k}, DType::bf16, Device::cuda()),
                   Tensor::zeros({experts, n, k}, DType::f32, Device::cuda()), Tensor::zeros({rows, n}, DType::bf16, Device::cuda()),
                   Tensor::zeros({rows, n}, DType::bf16, Device::cuda()), Tensor::zeros({rows, n / 2}, DType::bf16, Device::cuda())};
  };
  const auto run = [&](Outputs& o) {
    grouped_gemm_forward(x, w, offsets, o.y, scale);
    grouped_gemm_swiglu_forward(x, w, offsets, o.gate_up, o.h);
    grouped_gemm_backward_input(dy, w, offsets, o.dx);
    grouped_gemm_backward_weight(dy, x, offsets, o.dw, false);
    grouped_gemm_forward_fp8(qx, qxs, qw, qws, offsets, o.y8);
    grouped_gemm_forward_mxfp4(x, mx, mx_scales, offsets, o.y4, scale);
    Tensor no_gate_up;
    grouped_gemm_swiglu_forward_mxfp4(x, mx, mx_scales, offsets, no_gate_up, o.h4);
  };
  Outputs captured = make();
  cuda::begin_capture();
  run(captured);
  void* graph = cuda::end_capture();
  for (const auto& counts : routings) {
    ASSERT_EQ(total(counts), rows);
    offsets.copy_from(offsets_of(counts));
    cuda::launch_graph(graph);
    Outputs eager = make();
    run(eager);
    cuda::synchronize();
    for (const auto& [a, b] : {std::pair{captured.y, eager.y}, std::pair{captured.h, eager.h},
                               std::pair{captured.gate_up, eager.gate_up}, std::pair{captured.dx, eager.dx},
                               std::pair{captured.dw, eager.dw}, std::pair{captured.y8, eager.y8},
                               std::pair{captured.y4, eager.y4}, std::pair{captured.h4, eager.h4}})
      ASSERT_EQ(a.to(Device::cpu()).to_doubles(), b.to(Device::cpu()).to_doubles());
  }
  cuda::destroy_graph(graph);
}

}  // namespace
}  // namespace amber
