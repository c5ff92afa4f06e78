#include <gtest/gtest.h>

#include <cmath>

#include "amber/ops/loss.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;
using testing::relative_error;

// Materialised logits in double: the reference the chunked op must match.
Tensor reference_losses(const Tensor& x, const Tensor& w, const std::vector<int32_t>& targets, double z) {
  const auto xs = x.to_doubles(), ws = w.to_doubles();
  const int64_t tokens = x.size(0), dim = x.size(1), vocab = w.size(0);
  Tensor out = Tensor::empty({tokens}, DType::f64);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> logits(vocab);
    double m = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      double s = 0;
      for (int64_t d = 0; d < dim; ++d) s += xs[t * dim + d] * ws[v * dim + d];
      logits[v] = s;
      m = std::max(m, s);
    }
    double sum = 0;
    for (double l : logits) sum += std::exp(l - m);
    const double lse = m + std::log(sum);
    out.data<double>()[t] = targets[t] < 0 ? 0.0 : lse - logits[targets[t]] + z * lse * lse;
  }
  return out;
}

TEST(LinearCrossEntropy, ForwardMatchesMaterialisedLogits) {
  const int64_t tokens = 45, dim = 32, vocab = 300;
  const Tensor x = random_tensor({tokens, dim}, DType::f64, 1), w = random_tensor({vocab, dim}, DType::f64, 2, 0.3f);
  std::vector<int32_t> targets(tokens);
  for (int64_t t = 0; t < tokens; ++t) targets[t] = t % 7 == 3 ? -100 : static_cast<int32_t>((t * 37) % vocab);
  const Tensor tg = Tensor::from_vector(targets, {tokens});
  for (double z : {0.0, 1e-2}) {
    const Tensor ref = reference_losses(x, w, targets, z);
    CrossEntropyOptions opts;
    opts.z_loss_weight = z;
    opts.chunk_tokens = 8;  // several chunks and a ragged last one
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor losses = Tensor::empty({tokens}, DType::f32), lse = Tensor::empty({tokens}, DType::f32);
      linear_cross_entropy_forward(x.to(dt), w.to(dt), tg, opts, losses, lse);
      const double err = relative_error(losses, ref);
      std::cout << "linear CE forward " << dtype_name(dt) << " z=" << z << " rel err " << err << "\n";
      EXPECT_LT(err, dt == DType::f32 ? 1e-5 : 1e-2);
      EXPECT_EQ(losses.item(3), 0.0);  // ignored token
    }
  }
}

TEST(LinearCrossEntropy, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 9, dim = 6, vocab = 13;
  Tensor x = random_tensor({tokens, dim}, DType::f64, 3), w = random_tensor({vocab, dim}, DType::f64, 4);
  const std::vector<int32_t> targets = {1, 5, -100, 12, 0, 7, 7, 3, 9};
  const Tensor tg = Tensor::from_vector(targets, {tokens});
  const Tensor dl = random_tensor({tokens}, DType::f64, 5, 0.5f, 1.0f);
  CrossEntropyOptions opts;
  opts.z_loss_weight = 0.05;
  opts.chunk_tokens = 4;
  Tensor losses = Tensor::empty({tokens}, DType::f64), lse = Tensor::empty({tokens}, DType::f64);
  auto loss = [&] {
    linear_cross_entropy_forward(x, w, tg, opts, losses, lse);
    return testing::project(losses, dl);
  };
  loss();
  Tensor dx = Tensor::empty(x.shape(), DType::f64), dw = Tensor::zeros(w.shape(), DType::f64);
  linear_cross_entropy_backward(dl, x, w, tg, lse, opts, dx, dw);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss, 54), 1e-5);
  EXPECT_LT(testing::finite_difference_error(w, dw, loss, 78), 1e-5);
  for (int d = 0; d < dim; ++d) EXPECT_EQ(dx.item(2 * dim + d), 0.0);  // ignored token
}

TEST(LinearCrossEntropy, ForwardBackwardInOneCallEqualsTwoCalls) {
  const Tensor x = random_tensor({21, 8}, DType::f32, 11), w = random_tensor({30, 8}, DType::f32, 12);
  std::vector<int32_t> targets(21);
  for (int t = 0; t < 21; ++t) targets[t] = t % 5 == 0 ? -100 : (t * 7) % 30;
  const Tensor tg = Tensor::from_vector(targets, {21});
  const Tensor dl = random_tensor({21}, DType::f32, 13, 0.5f, 1.0f), dw0 = random_tensor({30, 8}, DType::f32, 14);
  CrossEntropyOptions opts;
  opts.z_loss_weight = 0.01;
  opts.chunk_tokens = 8;
  Tensor losses = Tensor::empty({21}, DType::f32), lse = Tensor::empty({21}, DType::f32);
  Tensor dx = Tensor::empty(x.shape(), DType::f32), dw = dw0.clone();
  linear_cross_entropy_forward(x, w, tg, opts, losses, lse);
  linear_cross_entropy_backward(dl, x, w, tg, lse, opts, dx, dw);
  Tensor f_losses = Tensor::empty({21}, DType::f32), f_lse = Tensor::empty({21}, DType::f32);
  Tensor f_dx = Tensor::empty(x.shape(), DType::f32), f_dw = dw0.clone();
  linear_cross_entropy_forward_backward(dl, x, w, tg, opts, f_losses, f_lse, f_dx, f_dw);
  EXPECT_EQ(f_losses.to_doubles(), losses.to_doubles());
  EXPECT_EQ(f_lse.to_doubles(), lse.to_doubles());
  EXPECT_EQ(f_dx.to_doubles(), dx.to_doubles());
  EXPECT_EQ(f_dw.to_doubles(), dw.to_doubles());
}

// Without accumulate_dw, dw is written from the first chunk on and its old values
// (NaN here) are never read: the result equals adding to zeros, in both calls.
TEST(LinearCrossEntropy, OverwrittenWeightGradientEqualsOneAddedToZeros) {
  const Tensor x = random_tensor({21, 8}, DType::f32, 15), w = random_tensor({30, 8}, DType::f32, 16);
  std::vector<int32_t> targets(21);
  for (int t = 0; t < 21; ++t) targets[t] = (t * 11) % 30;
  const Tensor tg = Tensor::from_vector(targets, {21});
  const Tensor dl = random_tensor({21}, DType::f32, 17, 0.5f, 1.0f);
  CrossEntropyOptions opts;
  opts.chunk_tokens = 8;
  Tensor losses = Tensor::empty({21}, DType::f32), lse = Tensor::empty({21}, DType::f32);
  Tensor dx = Tensor::empty(x.shape(), DType::f32), added = Tensor::zeros(w.shape(), DType::f32);
  linear_cross_entropy_forward_backward(dl, x, w, tg, opts, losses, lse, dx, added);
  Tensor fused = Tensor::full(w.shape(), NAN, DType::f32), split = Tensor::full(w.shape(), NAN, DType::f32);
  linear_cross_entropy_forward_backward(dl, x, w, tg, opts, losses, lse, dx, fused, false);
  linear_cross_entropy_backward(dl, x, w, tg, lse, opts, dx, split, false);
  EXPECT_EQ(fused.to_doubles(), added.to_doubles());
  EXPECT_EQ(split.to_doubles(), added.to_doubles());
  // No tokens: the overwritten gradient is zero.
  const Tensor none = Tensor::empty({0, 8}, DType::f32);
  Tensor empty_dx = none.clone(), empty_dw = Tensor::full(w.shape(), NAN, DType::f32);
  Tensor no_losses = Tensor::empty({0}, DType::f32), no_lse = Tensor::empty({0}, DType::f32);
  const Tensor no_targets = Tensor::empty({0}, DType::i32), no_dl = Tensor::empty({0}, DType::f32);
  linear_cross_entropy_forward_backward(no_dl, none, w, no_targets, opts, no_losses, no_lse, empty_dx, empty_dw,
                                        false);
  EXPECT_EQ(empty_dw.to_doubles(), std::vector<double>(w.numel(), 0.0));
}

TEST(LinearCrossEntropy, ChunkSizeDoesNotChangeResultsBeyondRounding) {
  const Tensor x = random_tensor({64, 16}, DType::f32, 6), w = random_tensor({50, 16}, DType::f32, 7);
  std::vector<int32_t> targets(64);
  for (int t = 0; t < 64; ++t) targets[t] = (t * 11) % 50;
  const Tensor tg = Tensor::from_vector(targets, {64});
  const Tensor dl = Tensor::full({64}, 1.0, DType::f32);
  Tensor results[2][2];
  int i = 0;
  for (int64_t chunk : {5, 64}) {
    CrossEntropyOptions opts;
    opts.chunk_tokens = chunk;
    Tensor losses = Tensor::empty({64}, DType::f32), lse = Tensor::empty({64}, DType::f32);
    linear_cross_entropy_forward(x, w, tg, opts, losses, lse);
    Tensor dx = Tensor::empty(x.shape(), DType::f32), dw = Tensor::zeros(w.shape(), DType::f32);
    linear_cross_entropy_backward(dl, x, w, tg, lse, opts, dx, dw);
    results[i][0] = losses;
    results[i++][1] = dw;
  }
  // Not bit for bit: OpenBLAS may order a row's products by the product's row count (its
  // AVX2 kernels, which it picks on AMD Zen 4, do), so chunks agree to f32 rounding.
  EXPECT_LT(relative_error(results[0][0], results[1][0]), 1e-6);
  EXPECT_LT(relative_error(results[0][1], results[1][1]), 1e-6);
}

TEST(LinearCrossEntropy, BadTargetNamesTheToken) {
  const Tensor x = Tensor::zeros({2, 4}, DType::f32), w = Tensor::zeros({5, 4}, DType::f32);
  const Tensor tg = Tensor::from_vector<int32_t>({1, 9}, {2});
  Tensor losses = Tensor::empty({2}, DType::f32), lse = Tensor::empty({2}, DType::f32);
  try {
    linear_cross_entropy_forward(x, w, tg, {}, losses, lse);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 9 at token 1"), std::string::npos) << e.what();
  }
}

// The device-side loss sums against float64 sums of the same per-token values: they
// add into the running sums, skip ignored tokens and count the trained ones.
TEST(LinearCrossEntropy, SumsMatchFloat64AndAccumulate) {
  const int64_t tokens = 1001;
  CrossEntropyOptions o;
  o.z_loss_weight = 1e-3;
  std::vector<int32_t> tg(tokens);
  for (int64_t t = 0; t < tokens; ++t) tg[t] = t % 5 == 2 ? o.ignore_index : static_cast<int32_t>(t % 97);
  const Tensor targets = Tensor::from_vector(tg, {tokens});
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor losses = random_tensor({tokens}, dt, 11, 1.0f, 5.0f), lse = random_tensor({tokens}, dt, 12, 1.0f, 8.0f);
    const std::vector<double> l = losses.to_doubles(), e = lse.to_doubles();
    double want_loss = 0, want_z = 0, want_count = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      if (tg[t] == o.ignore_index) continue;
      want_loss += l[t];
      want_z += o.z_loss_weight * e[t] * e[t];
      want_count += 1;
    }
    Tensor sums = Tensor::zeros({3}, DType::f64);
    linear_cross_entropy_sums(losses, lse, targets, o, sums);
    EXPECT_NEAR(sums.item(0), want_loss, 1e-12 * std::abs(want_loss)) << dtype_name(dt);
    EXPECT_NEAR(sums.item(1), want_z, 1e-12 * std::abs(want_z)) << dtype_name(dt);
    EXPECT_EQ(sums.item(2), want_count) << dtype_name(dt);
    EXPECT_EQ(want_count, 801);  // 200 of the 1001 tokens are ignored
    linear_cross_entropy_sums(losses, lse, targets, o, sums);  // a second micro-batch adds
    EXPECT_NEAR(sums.item(0), 2 * want_loss, 1e-12 * std::abs(want_loss)) << dtype_name(dt);
    EXPECT_EQ(sums.item(2), 2 * want_count) << dtype_name(dt);
  }
  Tensor wrong = Tensor::zeros({2}, DType::f64);
  const Tensor f = Tensor::zeros({tokens}, DType::f32);
  EXPECT_THROW(linear_cross_entropy_sums(f, f, targets, o, wrong), Error);
}

}  // namespace
}  // namespace amber
