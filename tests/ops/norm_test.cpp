#include <gtest/gtest.h>

#include <cmath>

#include "amber/ops/norm.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;
using testing::relative_error;

Tensor reference_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps, bool layer) {
  const auto xs = x.to_doubles(), ws = w.to_doubles();
  const std::vector<double> bs = b.defined() ? b.to_doubles() : std::vector<double>(ws.size(), 0.0);
  const int64_t d = x.size(-1), n = x.numel() / d;
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0, ss = 0;
    if (layer) {
      for (int64_t j = 0; j < d; ++j) mean += xs[r * d + j];
      mean /= d;
    }
    for (int64_t j = 0; j < d; ++j) ss += (xs[r * d + j] - mean) * (xs[r * d + j] - mean);
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j)
      y.data<double>()[r * d + j] = (xs[r * d + j] - mean) * inv * ws[j] + bs[j];
  }
  return y;
}

TEST(RmsNorm, ForwardMatchesFloat64) {
  const Tensor x = random_tensor({33, 96}, DType::f64, 1, 3.0f), w = random_tensor({96}, DType::f64, 2, 0.2f, 1.0f);
  const Tensor ref = reference_norm(x, w, Tensor(), 1e-6, false);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor y = Tensor::empty(x.shape(), dt), rstd = Tensor::empty({33}, norm_stat_dtype(dt));
    rmsnorm_forward(x.to(dt), w.to(dt), 1e-6, y, rstd);
    const double err = relative_error(y, ref);
    std::cout << "rmsnorm forward " << dtype_name(dt) << " rel err " << err << "\n";
    EXPECT_LT(err, dt == DType::f32 ? 1e-6 : 1e-2);
  }
}

// The residual add in the norm's pass: sum = x + scale * r against float64, and the
// output equal to the norm of that sum.
TEST(RmsNorm, ResidualAddNormalisesTheSum) {
  const Tensor x = random_tensor({17, 64}, DType::f64, 3, 2.0f), r = random_tensor({17, 64}, DType::f64, 4);
  const Tensor w = random_tensor({64}, DType::f64, 5, 0.2f, 1.0f);
  std::vector<double> want = x.to_doubles();
  const std::vector<double> rs = r.to_doubles();
  for (size_t i = 0; i < want.size(); ++i) want[i] += 0.25 * rs[i];
  const Tensor want_sum = Tensor::from_vector(want, x.shape());
  const Tensor ref = reference_norm(want_sum, w, Tensor(), 1e-6, false);
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    const Tensor xd = x.to(dt), rd = r.to(dt);
    Tensor sum = Tensor::empty(x.shape(), dt), y = Tensor::empty(x.shape(), dt);
    Tensor rstd = Tensor::empty({17}, norm_stat_dtype(dt));
    rmsnorm_forward(xd, w.to(dt), 1e-6, y, rstd, {&rd, 0.25, &sum});
    Tensor plain = Tensor::empty(x.shape(), dt), plain_rstd = Tensor::empty({17}, norm_stat_dtype(dt));
    rmsnorm_forward(sum, w.to(dt), 1e-6, plain, plain_rstd);
    EXPECT_EQ(y.to_doubles(), plain.to_doubles()) << dtype_name(dt);
    EXPECT_LT(relative_error(sum, want_sum), dt == DType::bf16 ? 1e-2 : 1e-7) << dtype_name(dt);
    EXPECT_LT(relative_error(y, ref), dt == DType::bf16 ? 1e-2 : 1e-6) << dtype_name(dt);
  }
}

TEST(LayerNorm, ForwardMatchesFloat64) {
  const Tensor x = random_tensor({33, 96}, DType::f64, 3, 2.0f, 5.0f);
  const Tensor w = random_tensor({96}, DType::f64, 4, 0.2f, 1.0f), b = random_tensor({96}, DType::f64, 5);
  const Tensor ref = reference_norm(x, w, b, 1e-5, true);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor y = Tensor::empty(x.shape(), dt), mean = Tensor::empty({33}, norm_stat_dtype(dt));
    Tensor rstd = Tensor::empty({33}, norm_stat_dtype(dt));
    layernorm_forward(x.to(dt), w.to(dt), b.to(dt), 1e-5, y, mean, rstd);
    const double err = relative_error(y, ref);
    std::cout << "layernorm forward " << dtype_name(dt) << " rel err " << err << "\n";
    EXPECT_LT(err, dt == DType::f32 ? 1e-6 : 1e-2);
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({70, 24}, DType::f64, 6), w = random_tensor({24}, DType::f64, 7, 0.3f, 1.0f);
  const Tensor proj = random_tensor(x.shape(), DType::f64, 8);
  Tensor y = Tensor::empty(x.shape(), DType::f64), rstd = Tensor::empty({70}, DType::f64);
  auto loss = [&] {
    rmsnorm_forward(x, w, 1e-6, y, rstd);
    return testing::project(y, proj);
  };
  loss();
  Tensor dx = Tensor::empty(x.shape(), DType::f64), dw = Tensor::zeros(w.shape(), DType::f64);
  rmsnorm_backward(proj, x, w, rstd, dx, dw);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss), 1e-5);
  EXPECT_LT(testing::finite_difference_error(w, dw, loss), 1e-5);
  // Without an affine weight (QK-norm without gain).
  Tensor dx2 = Tensor::empty(x.shape(), DType::f64), none;
  auto loss2 = [&] {
    rmsnorm_forward(x, Tensor(), 1e-6, y, rstd);
    return testing::project(y, proj);
  };
  loss2();
  rmsnorm_backward(proj, x, Tensor(), rstd, dx2, none);
  EXPECT_LT(testing::finite_difference_error(x, dx2, loss2), 1e-5);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({70, 24}, DType::f64, 9, 1.0f, 2.0f);
  Tensor w = random_tensor({24}, DType::f64, 10, 0.3f, 1.0f), b = random_tensor({24}, DType::f64, 11);
  const Tensor proj = random_tensor(x.shape(), DType::f64, 12);
  Tensor y = Tensor::empty(x.shape(), DType::f64), mean = Tensor::empty({70}, DType::f64);
  Tensor rstd = Tensor::empty({70}, DType::f64);
  auto loss = [&] {
    layernorm_forward(x, w, b, 1e-5, y, mean, rstd);
    return testing::project(y, proj);
  };
  loss();
  Tensor dx = Tensor::empty(x.shape(), DType::f64), dw = Tensor::zeros(w.shape(), DType::f64);
  Tensor db = Tensor::zeros(b.shape(), DType::f64);
  layernorm_backward(proj, x, w, mean, rstd, dx, dw, db);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss), 1e-5);
  EXPECT_LT(testing::finite_difference_error(w, dw, loss), 1e-5);
  EXPECT_LT(testing::finite_difference_error(b, db, loss), 1e-5);
}

// With `accumulate` both norms add the input gradient to dx (the residual stream's
// gradient) instead of overwriting it: prior + the overwritten result, in float64.
TEST(Norms, BackwardAccumulateAddsToDx) {
  const Tensor x = random_tensor({40, 24}, DType::f64, 13, 1.0f, 2.0f), dy = random_tensor(x.shape(), DType::f64, 14);
  const Tensor w = random_tensor({24}, DType::f64, 15, 0.3f, 1.0f), prior = random_tensor(x.shape(), DType::f64, 16);
  Tensor y = Tensor::empty(x.shape(), DType::f64), mean = Tensor::empty({40}, DType::f64);
  Tensor rstd = Tensor::empty({40}, DType::f64);
  const auto expect_sum = [&](const Tensor& added, const Tensor& alone, const char* what) {
    const std::vector<double> a = added.to_doubles(), b = alone.to_doubles(), p = prior.to_doubles();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], p[i] + b[i], 1e-12) << what << " " << i;
  };
  rmsnorm_forward(x, w, 1e-6, y, rstd);
  Tensor alone = Tensor::empty(x.shape(), DType::f64), added = prior.clone();
  Tensor dw = Tensor::zeros(w.shape(), DType::f64), dw_added = Tensor::zeros(w.shape(), DType::f64);
  rmsnorm_backward(dy, x, w, rstd, alone, dw);
  rmsnorm_backward(dy, x, w, rstd, added, dw_added, true);
  expect_sum(added, alone, "rmsnorm");
  EXPECT_EQ(dw_added.to_doubles(), dw.to_doubles());
  layernorm_forward(x, w, Tensor(), 1e-5, y, mean, rstd);
  Tensor db = Tensor::zeros(w.shape(), DType::f64);
  added = prior.clone();
  layernorm_backward(dy, x, w, mean, rstd, alone, dw, db);
  layernorm_backward(dy, x, w, mean, rstd, added, dw_added, db, true);
  expect_sum(added, alone, "layernorm");
}

// QK-norm reads the heads of a stacked projection in place and writes its gradient
// into the stacked gradient: on token-strided views the norms give the bits they give
// on contiguous copies, and the other heads stay as they were.
TEST(Norms, TokenStridedViewsMatchContiguousCopies) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor stack = random_tensor({30, 5, 16}, dt, 17, 1.0f, 2.0f), dy = random_tensor({30, 2, 16}, dt, 18);
    const Tensor w = random_tensor({16}, dt, 19, 0.3f, 1.0f);
    const Tensor x = stack.slice(1, 1, 3), x_copy = x.contiguous();
    ASSERT_FALSE(x.is_contiguous());
    Tensor y = Tensor::empty(dy.shape(), dt), y_copy = Tensor::empty(dy.shape(), dt);
    Tensor rstd = Tensor::empty({60}, DType::f32), rstd_copy = Tensor::empty({60}, DType::f32);
    rmsnorm_forward(x, w, 1e-6, y, rstd);
    rmsnorm_forward(x_copy, w, 1e-6, y_copy, rstd_copy);
    EXPECT_EQ(y.to_doubles(), y_copy.to_doubles()) << dtype_name(dt);
    EXPECT_EQ(rstd.to_doubles(), rstd_copy.to_doubles()) << dtype_name(dt);
    for (bool accumulate : {false, true}) {
      const Tensor grads = random_tensor(stack.shape(), dt, 20);
      Tensor stacked = grads.clone(), dx = stacked.slice(1, 1, 3), dx_copy = dx.contiguous();
      Tensor dw = Tensor::zeros({16}, DType::f32), dw_copy = Tensor::zeros({16}, DType::f32);
      rmsnorm_backward(dy, x, w, rstd, dx, dw, accumulate);
      rmsnorm_backward(dy, x_copy, w, rstd, dx_copy, dw_copy, accumulate);
      EXPECT_EQ(dx.contiguous().to_doubles(), dx_copy.to_doubles()) << dtype_name(dt) << " accumulate " << accumulate;
      EXPECT_EQ(dw.to_doubles(), dw_copy.to_doubles());
      for (int64_t head : {0, 3, 4})
        EXPECT_EQ(stacked.slice(1, head, head + 1).contiguous().to_doubles(),
                  grads.slice(1, head, head + 1).contiguous().to_doubles())
            << "head " << head << " was written";
    }
  }
}

TEST(RmsNorm, Float32BackwardMatchesFloat64) {
  const Tensor x = random_tensor({300, 64}, DType::f64, 13), w = random_tensor({64}, DType::f64, 14, 0.3f, 1.0f);
  const Tensor g = random_tensor(x.shape(), DType::f64, 15);
  Tensor ref_dx = Tensor::empty(x.shape(), DType::f64), ref_dw = Tensor::zeros({64}, DType::f64);
  Tensor y = Tensor::empty(x.shape(), DType::f64), r64 = Tensor::empty({300}, DType::f64);
  rmsnorm_forward(x, w, 1e-6, y, r64);
  rmsnorm_backward(g, x, w, r64, ref_dx, ref_dw);
  Tensor x32 = x.to(DType::f32), y32 = Tensor::empty(x.shape(), DType::f32), r32 = Tensor::empty({300}, DType::f32);
  rmsnorm_forward(x32, w.to(DType::f32), 1e-6, y32, r32);
  Tensor dx = Tensor::empty(x.shape(), DType::f32), dw = Tensor::zeros({64}, DType::f32);
  rmsnorm_backward(g.to(DType::f32), x32, w.to(DType::f32), r32, dx, dw);
  EXPECT_LT(relative_error(dx, ref_dx), 1e-5);
  EXPECT_LT(relative_error(dw, ref_dw), 1e-5);
}

}  // namespace
}  // namespace amber
