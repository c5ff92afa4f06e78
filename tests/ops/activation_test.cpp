#include <gtest/gtest.h>

#include <cmath>

#include "amber/ops/activation.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;
using testing::relative_error;

double silu(double x) { return x / (1 + std::exp(-x)); }
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

Tensor reference_glu(const Tensor& gate_up, double (*act)(double)) {
  const auto p = gate_up.to_doubles();
  const int64_t rows = gate_up.size(0), width = gate_up.size(1) / 2;
  Tensor h = Tensor::empty({rows, width}, DType::f64);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      h.data<double>()[r * width + j] = act(p[r * 2 * width + j]) * p[r * 2 * width + width + j];
  return h;
}

using GluForward = void (*)(const Tensor&, Tensor&);
using GluBackward = void (*)(const Tensor&, const Tensor&, Tensor&);

void check_glu(GluForward fwd, GluBackward bwd, double (*act)(double), const char* name) {
  const Tensor gu = random_tensor({41, 64}, DType::f64, 1, 2.0f);
  const Tensor ref = reference_glu(gu, act);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor h = Tensor::empty({41, 32}, dt);
    fwd(gu.to(dt), h);
    const double err = relative_error(h, ref);
    std::cout << name << " forward " << dtype_name(dt) << " rel err " << err << "\n";
    EXPECT_LT(err, dt == DType::f32 ? 1e-6 : 1e-2) << name;
  }
  Tensor x = random_tensor({6, 16}, DType::f64, 2, 2.0f);
  const Tensor proj = random_tensor({6, 8}, DType::f64, 3);
  Tensor h = Tensor::empty({6, 8}, DType::f64);
  auto loss = [&] {
    fwd(x, h);
    return testing::project(h, proj);
  };
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  bwd(proj, x, dx);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss, 96), 1e-5) << name;
}

TEST(SwiGlu, ForwardAndBackward) { check_glu(swiglu_forward, swiglu_backward, silu, "swiglu"); }
TEST(GeGlu, ForwardAndBackward) { check_glu(geglu_forward, geglu_backward, gelu_tanh, "geglu"); }

TEST(Gelu, ForwardAndBackward) {
  const Tensor x = random_tensor({1000}, DType::f64, 4, 3.0f);
  Tensor ref = Tensor::empty(x.shape(), DType::f64);
  for (int64_t i = 0; i < 1000; ++i) ref.data<double>()[i] = gelu_erf(x.item(i));
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  gelu_forward(x.to(DType::f32), y);
  EXPECT_LT(relative_error(y, ref), 1e-6);
  Tensor xs = random_tensor({50}, DType::f64, 5, 3.0f), ys = Tensor::empty({50}, DType::f64);
  const Tensor proj = random_tensor({50}, DType::f64, 6);
  auto loss = [&] {
    gelu_forward(xs, ys);
    return testing::project(ys, proj);
  };
  Tensor dx = Tensor::empty({50}, DType::f64);
  gelu_backward(proj, xs, dx);
  EXPECT_LT(testing::finite_difference_error(xs, dx, loss, 50), 1e-5);
}

TEST(SwiGlu, RejectsMismatchedShapes) {
  Tensor gu = Tensor::zeros({4, 10}, DType::f32), h = Tensor::empty({4, 4}, DType::f32);
  EXPECT_THROW(swiglu_forward(gu, h), Error);
}

}  // namespace
}  // namespace amber
