#include <gtest/gtest.h>

#include <cmath>

#include "amber/ops/elementwise.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;

// The residual add (x += alpha * y, or out = x + alpha * y into a third tensor) and
// the branch scaling (out = alpha * in).
TEST(Elementwise, ResidualAddAndScaleMatchFloat64) {
  const Tensor x = random_tensor({37, 70}, DType::f64, 1), y = random_tensor({37, 70}, DType::f64, 2);
  const std::vector<double> xs = x.to_doubles(), ys = y.to_doubles();
  Tensor sum_ref = Tensor::empty(x.shape(), DType::f64), scaled_ref = Tensor::empty(x.shape(), DType::f64);
  for (size_t i = 0; i < xs.size(); ++i) {
    sum_ref.data<double>()[i] = xs[i] + 0.7 * ys[i];
    scaled_ref.data<double>()[i] = -1.3 * ys[i];
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor acc = x.to(dt);
    add_scaled(acc, y.to(dt), 0.7);
    Tensor into = Tensor::full(x.shape(), NAN, dt);
    add_scaled_into(into, x.to(dt), y.to(dt), 0.7);
    EXPECT_EQ(into.to_doubles(), acc.to_doubles()) << "add_scaled_into and add_scaled differ";
    Tensor out = Tensor::empty(x.shape(), dt);
    scale_into(out, y.to(dt), -1.3);
    const double e1 = testing::relative_error(acc, sum_ref), e2 = testing::relative_error(out, scaled_ref);
    std::cout << "residual add " << dtype_name(dt) << " rel err " << e1 << ", scale " << e2 << "\n";
    EXPECT_LT(e1, dt == DType::f32 ? 1e-6 : 1e-2);
    EXPECT_LT(e2, dt == DType::f32 ? 1e-6 : 1e-2);
  }
  Tensor wrong = Tensor::empty({37, 71}, DType::f32);
  EXPECT_THROW(add_scaled(wrong, y.to(DType::f32)), Error);
  EXPECT_THROW(add_scaled_into(wrong, x.to(DType::f32), y.to(DType::f32), 1.0), Error);
}

// zero_all zeroes each tensor, of any dtype, and nothing around a view; a tensor that
// is not contiguous is refused.
TEST(Elementwise, ZeroAllZeroesEachTensor) {
  Tensor a = random_tensor({5, 3}, DType::f32, 3), b = random_tensor({9}, DType::f64, 4);
  Tensor base = random_tensor({10}, DType::bf16, 5);
  const std::vector<double> before = base.to_doubles();
  std::vector<Tensor> tensors = {a, b, base.slice(0, 2, 7), Tensor::empty({0}, DType::f32)};
  zero_all(tensors);
  for (double v : a.to_doubles()) EXPECT_EQ(v, 0.0);
  for (double v : b.to_doubles()) EXPECT_EQ(v, 0.0);
  const std::vector<double> after = base.to_doubles();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(after[i], i >= 2 && i < 7 ? 0.0 : before[i]) << i;
  std::vector<Tensor> strided = {random_tensor({4, 6}, DType::f32, 6).slice(1, 0, 3)};
  EXPECT_THROW(zero_all(strided), Error);
}

}  // namespace
}  // namespace amber
