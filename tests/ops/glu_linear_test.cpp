// ops/glu_linear.h on the CPU: each call is the product and the activation op (their
// own tests check them against float64 and finite differences), so here the two forms
// must agree bit for bit, with and without a bias, and bad shapes must be refused
// before anything runs. The GPU's epilogue forms are in gpu_ops_test.cpp.
#include <gtest/gtest.h>

#include "amber/core/error.h"
#include "amber/ops/activation.h"
#include "amber/ops/gemm.h"
#include "amber/ops/glu_linear.h"
#include "bench/kernel_bench.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;

TEST(GluLinear, IsTheProductAndTheActivationOnTheCpu) {
  const int64_t rows = 23, in = 40, hidden = 24, out = 16;
  const Tensor x = random_tensor({rows, in}, DType::f32, 1), w = random_tensor({2 * hidden, in}, DType::f32, 2);
  const Tensor bias = random_tensor({2 * hidden}, DType::f32, 3), w_down = random_tensor({out, hidden}, DType::f32, 4);
  const Tensor dy = random_tensor({rows, out}, DType::f32, 5);
  for (Glu glu : {Glu::swiglu, Glu::geglu}) {
    const auto act_forward = glu == Glu::swiglu ? swiglu_forward : geglu_forward;
    const auto act_backward = glu == Glu::swiglu ? swiglu_backward : geglu_backward;
    for (const Tensor& b : {Tensor(), bias}) {
      Tensor gate_up = Tensor::empty({rows, 2 * hidden}, DType::f32), h = Tensor::empty({rows, hidden}, DType::f32);
      EXPECT_FALSE(glu_linear_forward(glu, x, w, b, gate_up, h));
      Tensor expected_gate_up = Tensor::empty(gate_up.shape(), DType::f32);
      Tensor expected_h = Tensor::empty(h.shape(), DType::f32);
      linear_forward(x, w, b, expected_gate_up);
      act_forward(expected_gate_up, expected_h);
      EXPECT_EQ(gate_up.to_doubles(), expected_gate_up.to_doubles());
      EXPECT_EQ(h.to_doubles(), expected_h.to_doubles());
    }
    Tensor gate_up = Tensor::empty({rows, 2 * hidden}, DType::f32), h = Tensor::empty({rows, hidden}, DType::f32);
    glu_linear_forward(glu, x, w, Tensor(), gate_up, h);
    Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::f32), dh = Tensor::empty(h.shape(), DType::f32);
    EXPECT_FALSE(glu_linear_backward_input(glu, dy, w_down, gate_up, dgate_up, dh));
    Tensor expected_dh = Tensor::empty(h.shape(), DType::f32), expected = Tensor::empty(gate_up.shape(), DType::f32);
    gemm(dy, false, w_down, false, expected_dh);
    act_backward(expected_dh, gate_up, expected);
    EXPECT_EQ(dgate_up.to_doubles(), expected.to_doubles());
  }
  EXPECT_FALSE(glu_epilogues(Device::cpu()));
}

TEST(GluLinear, RefusesMismatchedShapes) {
  const Tensor x = random_tensor({8, 16}, DType::f32, 1), w = random_tensor({12, 16}, DType::f32, 2);
  Tensor gate_up = Tensor::empty({8, 12}, DType::f32), h = Tensor::empty({8, 6}, DType::f32);
  Tensor odd_w = random_tensor({11, 16}, DType::f32, 3), narrow_h = Tensor::empty({8, 5}, DType::f32);
  Tensor short_gate_up = Tensor::empty({7, 12}, DType::f32);
  EXPECT_THROW(glu_linear_forward(Glu::swiglu, x, odd_w, Tensor(), gate_up, h), Error);
  EXPECT_THROW(glu_linear_forward(Glu::swiglu, x, w, Tensor(), gate_up, narrow_h), Error);
  EXPECT_THROW(glu_linear_forward(Glu::swiglu, x, w, Tensor(), short_gate_up, h), Error);
  EXPECT_THROW(glu_linear_forward(Glu::swiglu, x.slice(1, 0, 8), w, Tensor(), gate_up, h), Error);
  const Tensor dy = random_tensor({8, 4}, DType::f32, 4), w_down = random_tensor({4, 6}, DType::f32, 5);
  Tensor dgate_up = Tensor::empty({8, 12}, DType::f32), dh = Tensor::empty({8, 6}, DType::f32);
  Tensor wrong_dgate_up = Tensor::empty({8, 10}, DType::f32);
  EXPECT_THROW(glu_linear_backward_input(Glu::swiglu, dy, w_down, gate_up, wrong_dgate_up, dh), Error);
  EXPECT_THROW(glu_linear_backward_input(Glu::swiglu, dy, w_down, short_gate_up, dgate_up, dh), Error);
  EXPECT_THROW(glu_linear_backward_input(Glu::swiglu, dy.slice(1, 0, 3), w_down, gate_up, dgate_up, dh), Error);
}

// `amber bench kernel glu`: both arms of both directions, each timed; on the CPU the
// one call says it has no epilogue form.
TEST(GluLinear, BenchTimesBothArmsOfBothDirections) {
  const std::vector<GluBenchRow> rows = run_glu_bench(Device::cpu(), 16, 32, 24, 1);
  ASSERT_EQ(rows.size(), 4u);
  const char* arms[] = {"forward: gate/up product + SwiGLU pass", "forward: one call (no epilogue form here)",
                        "backward: dh product + SwiGLU backward pass", "backward: one call (no epilogue form here)"};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].arm, arms[i]);
    EXPECT_GT(rows[i].ms, 0.0) << rows[i].arm;
  }
  EXPECT_THROW(run_glu_bench(Device::cpu(), 0, 32, 24, 1), Error);
}

}  // namespace
}  // namespace amber
