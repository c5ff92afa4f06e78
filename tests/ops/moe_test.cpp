// MoE routing ops (ops/moe.h) on the CPU: scores, top-k and weights against hand
// computation, ties to the lower expert, the bias choosing without weighting, the router
// backward against float64 finite differences for every score function, the stable
// counting sort, gather/combine as each other's adjoint, and the fused SwiGLU backward
// against float64 finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "amber/core/cuda_runtime.h"
#include "amber/ops/grouped_gemm.h"
#include "amber/ops/moe.h"
#include "amber/ops/quant.h"
#include "testing.h"

namespace amber {
namespace {

using testing::bytes_of;
using testing::random_tensor;

struct Routed {
  Tensor scores, experts, weights;
};

Routed route(const RouterSpec& spec, const Tensor& logits, const Tensor& bias = Tensor()) {
  const int64_t t = logits.size(0);
  Routed r{Tensor::empty(logits.shape(), logits.dtype()), Tensor::empty({t, spec.top_k}, DType::i32),
           Tensor::empty({t, spec.top_k}, logits.dtype())};
  moe_route_forward(spec, logits, bias, r.scores, r.experts, r.weights);
  return r;
}

TEST(MoeRoute, SoftmaxTopKPicksTheLargestAndNormalizes) {
  const Tensor logits = Tensor::from_vector(std::vector<float>{0.5f, 2.0f, -1.0f, 1.0f}, {1, 4});
  const Routed r = route({RouterScore::softmax, 2, true, 2.5}, logits);
  EXPECT_EQ(r.experts.item(0), 1);
  EXPECT_EQ(r.experts.item(1), 3);
  // Normalized over the chosen two: softmax's denominator cancels.
  const double a = std::exp(2.0), b = std::exp(1.0);
  EXPECT_NEAR(r.weights.item(0), 2.5 * a / (a + b), 1e-6);
  EXPECT_NEAR(r.weights.item(1), 2.5 * b / (a + b), 1e-6);
  double total = 0;
  for (double s : r.scores.to_doubles()) total += s;
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(MoeRoute, TiesGoToTheLowerExpertAndTheBiasOnlyChooses) {
  const Tensor logits = Tensor::from_vector(std::vector<float>{0.0f, 1.0f, 1.0f, 1.0f}, {1, 4});
  const Routed tie = route({RouterScore::sigmoid, 2, false, 1.0}, logits);
  EXPECT_EQ(tie.experts.item(0), 1);
  EXPECT_EQ(tie.experts.item(1), 2);
  // A bias on expert 0 makes it chosen first; its weight is still its own score.
  const Tensor bias = Tensor::from_vector(std::vector<float>{1.0f, 0.0f, 0.0f, 0.5f}, {4});
  const Routed biased = route({RouterScore::sigmoid, 2, false, 1.0}, logits, bias);
  EXPECT_EQ(biased.experts.item(0), 0);
  EXPECT_EQ(biased.experts.item(1), 3);
  EXPECT_NEAR(biased.weights.item(0), 0.5, 1e-7);
  EXPECT_NEAR(biased.weights.item(1), 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

// sum(g * weights(logits)) differentiated by central differences, the choice held fixed
// (steps far below the gaps between the scores).
TEST(MoeRoute, BackwardMatchesFiniteDifferencesForEveryScore) {
  for (const RouterScore score : {RouterScore::softmax, RouterScore::sigmoid, RouterScore::sqrt_softplus})
    for (const bool normalize : {true, false}) {
      const RouterSpec spec{score, 3, normalize, 1.7};
      Tensor logits = random_tensor({5, 8}, DType::f64, 11);
      const Tensor g = random_tensor({5, 3}, DType::f64, 12);
      const Routed r = route(spec, logits);
      Tensor dlogits = Tensor::empty({5, 8}, DType::f64);
      moe_route_backward(spec, g, r.scores, r.experts, dlogits);
      const std::vector<double> chosen = r.experts.to_doubles();
      const auto loss = [&] {
        const Routed again = route(spec, logits);
        EXPECT_EQ(again.experts.to_doubles(), chosen) << "a finite-difference step changed the choice";
        const std::vector<double> w = again.weights.to_doubles(), gs = g.to_doubles();
        return std::inner_product(w.begin(), w.end(), gs.begin(), 0.0);
      };
      EXPECT_LT(testing::finite_difference_error(logits, dlogits, loss, 40, 1e-5), 1e-5)
          << "score " << static_cast<int>(score) << " normalize " << normalize;
    }
}

TEST(MoePermute, CountingSortIsStableAndInvertible) {
  const Tensor experts = Tensor::from_vector(std::vector<int32_t>{2, 0, 0, 3, 2, 1, 0, 2}, {4, 2});
  Tensor offsets = Tensor::empty({5}, DType::i32), slot_rows = Tensor::empty({4, 2}, DType::i32);
  Tensor row_tokens = Tensor::empty({8}, DType::i32);
  moe_permute(experts, 4, offsets, slot_rows, row_tokens);
  EXPECT_EQ(offsets.to_doubles(), (std::vector<double>{0, 3, 4, 7, 8}));
  // Expert 0 holds tokens 0, 1 and 3 in token order; expert 2 tokens 0, 2 and 3.
  EXPECT_EQ(row_tokens.to_doubles(), (std::vector<double>{0, 1, 3, 2, 0, 2, 3, 1}));
  const std::vector<double> rows = slot_rows.to_doubles(), toks = row_tokens.to_doubles(),
                            ex = experts.to_doubles(), off = offsets.to_doubles();
  for (int i = 0; i < 8; ++i) {
    const int row = static_cast<int>(rows[i]);
    EXPECT_EQ(toks[row], i / 2) << "copy " << i;
    EXPECT_GE(row, off[static_cast<int>(ex[i])]);
    EXPECT_LT(row, off[static_cast<int>(ex[i]) + 1]);
  }
}

// <combine(ys), u> = <ys, gather(u)>: the combine is the gather's adjoint, so each is the
// other's backward.
TEST(MoeGather, CombineIsTheAdjointOfGather) {
  const Tensor experts = Tensor::from_vector(std::vector<int32_t>{1, 0, 2, 1, 0, 2}, {3, 2});
  Tensor offsets = Tensor::empty({4}, DType::i32), slot_rows = Tensor::empty({3, 2}, DType::i32);
  Tensor row_tokens = Tensor::empty({6}, DType::i32);
  moe_permute(experts, 3, offsets, slot_rows, row_tokens);
  const Tensor ys = random_tensor({6, 5}, DType::f64, 21), u = random_tensor({3, 5}, DType::f64, 22);
  Tensor combined = Tensor::empty({3, 5}, DType::f64), gathered = Tensor::empty({6, 5}, DType::f64);
  moe_combine(ys, slot_rows, combined);
  moe_gather(u, row_tokens, gathered);
  const std::vector<double> c = combined.to_doubles(), uu = u.to_doubles(), y = ys.to_doubles(),
                            g = gathered.to_doubles();
  EXPECT_NEAR(std::inner_product(c.begin(), c.end(), uu.begin(), 0.0),
              std::inner_product(y.begin(), y.end(), g.begin(), 0.0), 1e-12);
  Tensor twice = combined.clone();
  moe_combine(ys, slot_rows, twice, true);
  const std::vector<double> t = twice.to_doubles();
  for (size_t i = 0; i < t.size(); ++i) EXPECT_DOUBLE_EQ(t[i], 2 * c[i]);
}

TEST(MoeWeights, RowsAndGradientsFollowTheCopies) {
  const Tensor experts = Tensor::from_vector(std::vector<int32_t>{1, 0, 0, 1}, {2, 2});
  Tensor offsets = Tensor::empty({3}, DType::i32), slot_rows = Tensor::empty({2, 2}, DType::i32);
  Tensor row_tokens = Tensor::empty({4}, DType::i32);
  moe_permute(experts, 2, offsets, slot_rows, row_tokens);
  const Tensor weights = Tensor::from_vector(std::vector<double>{0.7, 0.3, 0.6, 0.4}, {2, 2});
  Tensor rows = Tensor::empty({4}, DType::f64);
  moe_weights_to_rows(weights, slot_rows, rows);
  const std::vector<double> sr = slot_rows.to_doubles(), w = weights.to_doubles(), r = rows.to_doubles();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r[static_cast<int>(sr[i])], w[i]);
}

// The fused SwiGLU backward gives the gradients of L = sum_r w_r <da_r, silu(g_r) u_r>
// with respect to gate_up (by float64 finite differences) and to each copy's weight,
// and the weighted activation w_r silu(g_r) u_r.
TEST(MoeSwigluBackward, GradientsAreThoseOfTheWeightedActivation) {
  const Tensor experts = Tensor::from_vector(std::vector<int32_t>{1, 0, 2, 1, 0, 2}, {3, 2});
  Tensor offsets = Tensor::empty({4}, DType::i32), slot_rows = Tensor::empty({3, 2}, DType::i32);
  Tensor row_tokens = Tensor::empty({6}, DType::i32);
  moe_permute(experts, 3, offsets, slot_rows, row_tokens);
  const int64_t rows = 6, width = 5;
  const Tensor da = random_tensor({rows, width}, DType::f64, 31), weights = random_tensor({rows}, DType::f64, 33);
  Tensor gate_up = random_tensor({rows, 2 * width}, DType::f64, 32);
  Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::f64), act_w = Tensor::empty(da.shape(), DType::f64);
  Tensor dweights = Tensor::empty({3, 2}, DType::f64);
  moe_swiglu_backward(da, gate_up, weights, slot_rows, dgate_up, act_w, dweights);
  const auto loss_and_act = [&](const Tensor& w, std::vector<double>* act) {
    const std::vector<double> d = da.to_doubles(), gu = gate_up.to_doubles(), ww = w.to_doubles();
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; ++c) {
        const double g = gu[r * 2 * width + c], u = gu[r * 2 * width + width + c];
        const double a = g / (1 + std::exp(-g)) * u;
        sum += ww[r] * d[r * width + c] * a;
        if (act) act->push_back(ww[r] * a);
      }
    return sum;
  };
  std::vector<double> want_act;
  loss_and_act(weights, &want_act);
  const std::vector<double> got_act = act_w.to_doubles();
  for (size_t i = 0; i < want_act.size(); ++i) EXPECT_NEAR(got_act[i], want_act[i], 1e-12);
  EXPECT_LT(testing::finite_difference_error(gate_up, dgate_up, [&] { return loss_and_act(weights, nullptr); }, 60),
            1e-6);
  // A copy's weight gradient sits at its slot; the weight at its row.
  Tensor w = weights.clone();
  const std::vector<double> sr = slot_rows.to_doubles(), dw = dweights.to_doubles();
  for (int i = 0; i < 6; ++i) {
    double* wr = w.data<double>() + static_cast<int64_t>(sr[i]);
    const double saved = *wr;
    *wr = saved + 1e-6;
    const double up = loss_and_act(w, nullptr);
    *wr = saved - 1e-6;
    const double down = loss_and_act(w, nullptr);
    *wr = saved;
    EXPECT_NEAR(dw[i], (up - down) / 2e-6, 1e-7) << "copy " << i;
  }
}

// The auxiliary-loss-free bias: an expert above the mean load is chosen less, one
// below it more, one at the mean keeps its bias; a skipped step changes nothing; the
// load restarts after every step; each step's statistics (busiest over mean, idle
// experts, bias spread), also without a bias.
TEST(MoeBias, UpdateMovesTowardBalanceOnlyWhenApplied) {
  const Tensor offsets = Tensor::from_vector(std::vector<int32_t>{0, 3, 4, 6}, {4});  // loads 3, 1, 2
  Tensor load = Tensor::zeros({3}, DType::f64), bias = Tensor::zeros({3}, DType::f32);
  Tensor stats = Tensor::zeros({3}, DType::f64);
  moe_add_load(offsets, load);
  moe_add_load(offsets, load);  // two micro-batches: 6, 2, 4
  EXPECT_EQ(load.to_doubles(), (std::vector<double>{6, 2, 4}));
  moe_end_step(bias, load, 0.25, Tensor::from_vector(std::vector<double>{0.0}, {1}), stats);
  EXPECT_EQ(bias.to_doubles(), (std::vector<double>{0, 0, 0})) << "a skipped step moved the bias";
  EXPECT_EQ(load.to_doubles(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(stats.to_doubles(), (std::vector<double>{1.5, 0, 0}));
  moe_add_load(offsets, load);
  moe_end_step(bias, load, 0.25, Tensor::from_vector(std::vector<double>{1.0}, {1}), stats);
  EXPECT_EQ(bias.to_doubles(), (std::vector<double>{-0.25, 0.25, 0}));
  EXPECT_EQ(load.to_doubles(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(stats.to_doubles(), (std::vector<double>{1.5, 0, 0.5}));
  Tensor no_bias;
  const Tensor idle = Tensor::from_vector(std::vector<int32_t>{0, 4, 4, 6}, {4});  // loads 4, 0, 2
  moe_add_load(idle, load);
  moe_end_step(no_bias, load, 0.25, Tensor::from_vector(std::vector<double>{1.0}, {1}), stats);
  EXPECT_EQ(stats.to_doubles(), (std::vector<double>{2, 1, 0}));
}

// ---- GPU against the CPU ------------------------------------------------------------

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

TEST(MoeGpu, RouterMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const RouterScore score : {RouterScore::softmax, RouterScore::sigmoid, RouterScore::sqrt_softplus})
    for (const int experts : {8, 64, 100}) {
      const RouterSpec spec{score, experts == 8 ? 2 : 8, score != RouterScore::sqrt_softplus, 2.5};
      const Tensor logits = random_tensor({300, experts}, DType::f32, 50 + experts);
      const Tensor bias = random_tensor({experts}, DType::f32, 51, 0.01f);
      const Routed c = route(spec, logits, bias);
      Tensor s = Tensor::empty(logits.shape(), DType::f32, Device::cuda());
      Tensor e = Tensor::empty({300, spec.top_k}, DType::i32, Device::cuda());
      Tensor w = Tensor::empty({300, spec.top_k}, DType::f32, Device::cuda());
      moe_route_forward(spec, gpu(logits), gpu(bias), s, e, w);
      EXPECT_EQ(e.to(Device::cpu()).to_doubles(), c.experts.to_doubles()) << "experts, " << experts;
      EXPECT_LT(testing::relative_error(s.to(Device::cpu()), c.scores), 1e-6);
      EXPECT_LT(testing::relative_error(w.to(Device::cpu()), c.weights), 1e-6);
      const Tensor g = random_tensor({300, spec.top_k}, DType::f32, 52);
      Tensor dl_cpu = Tensor::empty(logits.shape(), DType::f32), dl = Tensor::empty(logits.shape(), DType::f32, Device::cuda());
      moe_route_backward(spec, g, c.scores, c.experts, dl_cpu);
      moe_route_backward(spec, gpu(g), s, e, dl);
      EXPECT_LT(testing::relative_error(dl.to(Device::cpu()), dl_cpu), 1e-5) << "router backward, " << experts;
      // The auxiliary losses over four documents, one of them empty, added on top.
      const Tensor cu = Tensor::from_vector(std::vector<int32_t>{0, 100, 100, 250, 300}, {5});
      const Tensor scale = Tensor::from_vector(std::vector<double>{0.5}, {1});
      Tensor sum = Tensor::zeros({1}, DType::f64), gsum = Tensor::zeros({1}, DType::f64, Device::cuda());
      moe_router_loss(spec, {0.3, 0.05}, logits, c.scores, c.experts, cu, scale, dl_cpu, sum);
      moe_router_loss(spec, {0.3, 0.05}, gpu(logits), s, e, gpu(cu), gpu(scale), dl, gsum);
      EXPECT_LT(testing::relative_error(dl.to(Device::cpu()), dl_cpu), 1e-5) << "router losses, " << experts;
      EXPECT_NEAR(gsum.to(Device::cpu()).item(0), sum.item(0), 1e-5 * sum.item(0)) << "router losses, " << experts;
    }
}

// The GPU's counting sort gives the CPU's rows exactly, and the row ops follow them.
// Shapes: several sort chunks with a partial last one; a row width whose SwiGLU half
// takes the 16-byte path (64) and one that does not (36).
TEST(MoeGpu, SortGatherCombineAndWeightsMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t tokens, k, experts, width;
  };
  // Widths of 9, 16, 97 and 257 16-byte units: the narrow gather, then the warp per row
  // with part of a lane's units, and with more than one round of them.
  for (const Case c :
       {Case{3000, 4, 16, 72}, Case{2500, 8, 100, 128}, Case{700, 2, 8, 776}, Case{300, 2, 8, 2056}}) {
    SCOPED_TRACE(c.width);
    const int64_t tokens = c.tokens, k = c.k, experts = c.experts, width = c.width;
    const Routed r = route({RouterScore::softmax, static_cast<int>(k), true, 1.0},
                           random_tensor({tokens, experts}, DType::f32, 60));
    Tensor off = Tensor::empty({experts + 1}, DType::i32), rows = Tensor::empty({tokens, k}, DType::i32);
    Tensor toks = Tensor::empty({tokens * k}, DType::i32);
    moe_permute(r.experts, experts, off, rows, toks);
    Tensor goff = Tensor::empty({experts + 1}, DType::i32, Device::cuda());
    Tensor grows = Tensor::empty({tokens, k}, DType::i32, Device::cuda());
    Tensor gtoks = Tensor::empty({tokens * k}, DType::i32, Device::cuda());
    moe_permute(gpu(r.experts), experts, goff, grows, gtoks);
    EXPECT_EQ(goff.to(Device::cpu()).to_doubles(), off.to_doubles());
    EXPECT_EQ(grows.to(Device::cpu()).to_doubles(), rows.to_doubles());
    EXPECT_EQ(gtoks.to(Device::cpu()).to_doubles(), toks.to_doubles());
    const Tensor x = random_tensor({tokens, width}, DType::bf16, 61);
    Tensor xs = Tensor::empty({tokens * k, width}, DType::bf16), gxs = Tensor::empty({tokens * k, width}, DType::bf16, Device::cuda());
    moe_gather(x, toks, xs);
    moe_gather(gpu(x), gtoks, gxs);
    EXPECT_EQ(gxs.to(Device::cpu()).to_doubles(), xs.to_doubles());
    Tensor out = Tensor::empty({tokens, width}, DType::bf16), gout = Tensor::empty({tokens, width}, DType::bf16, Device::cuda());
    moe_combine(xs, rows, out);
    moe_combine(gxs, grows, gout);
    EXPECT_LT(testing::relative_error(gout.to(Device::cpu()), out), 1e-2);
    Tensor rw = Tensor::empty({tokens * k}, DType::f32), grw = Tensor::empty({tokens * k}, DType::f32, Device::cuda());
    moe_weights_to_rows(r.weights, rows, rw);
    moe_weights_to_rows(gpu(r.weights), grows, grw);
    EXPECT_EQ(grw.to(Device::cpu()).to_doubles(), rw.to_doubles());
    const int64_t hidden = width / 2;
    const Tensor gate_up = random_tensor(xs.shape(), DType::bf16, 62), da = random_tensor({tokens * k, hidden}, DType::bf16, 63);
    Tensor dgu = Tensor::empty(gate_up.shape(), DType::bf16), act_w = Tensor::empty(da.shape(), DType::bf16);
    Tensor dw = Tensor::empty({tokens, k}, DType::f32);
    Tensor gdgu = Tensor::empty(gate_up.shape(), DType::bf16, Device::cuda());
    Tensor gact_w = Tensor::empty(da.shape(), DType::bf16, Device::cuda());
    Tensor gdw = Tensor::empty({tokens, k}, DType::f32, Device::cuda());
    moe_swiglu_backward(da, gate_up, rw, rows, dgu, act_w, dw);
    moe_swiglu_backward(gpu(da), gpu(gate_up), grw, grows, gdgu, gact_w, gdw);
    EXPECT_LT(testing::relative_error(gdgu.to(Device::cpu()), dgu), 1e-2);
    EXPECT_LT(testing::relative_error(gact_w.to(Device::cpu()), act_w), 1e-2);
    EXPECT_LT(testing::relative_error(gdw.to(Device::cpu()), dw), 1e-2);
    Tensor load = Tensor::zeros({experts}, DType::f64), gload = Tensor::zeros({experts}, DType::f64, Device::cuda());
    Tensor bias = Tensor::zeros({experts}, DType::f32), gbias = Tensor::zeros({experts}, DType::f32, Device::cuda());
    const Tensor apply = Tensor::from_vector(std::vector<double>{1.0}, {1});
    moe_add_load(off, load);
    moe_add_load(goff, gload);
    EXPECT_EQ(gload.to(Device::cpu()).to_doubles(), load.to_doubles());
    Tensor stats = Tensor::zeros({3}, DType::f64), gstats = Tensor::zeros({3}, DType::f64, Device::cuda());
    moe_end_step(bias, load, 0.01, apply, stats);
    moe_end_step(gbias, gload, 0.01, gpu(apply), gstats);
    EXPECT_EQ(gbias.to(Device::cpu()).to_doubles(), bias.to_doubles());
    EXPECT_EQ(gstats.to(Device::cpu()).to_doubles(), stats.to_doubles());
  }
}

// Row tokens (i * stride) % tokens of `copies` rows: every token several times, out of
// order, as a gather's rows are.
Tensor scattered_tokens(int64_t copies, int64_t tokens, int64_t stride) {
  Tensor toks = Tensor::empty({copies}, DType::i32);
  auto* at = static_cast<int32_t*>(toks.raw());
  for (int64_t i = 0; i < copies; ++i) at[i] = static_cast<int32_t>((i * stride) % tokens);
  return toks;
}

// The SwiGLU backward that also writes dgate_up's FP8 row codes gives the plain pass's
// bits, and codes equal to quantizing its dgate_up (on the GPU and by the CPU oracle):
// expert widths of three and two 128-wide blocks run the one pass, 72 the two passes.
TEST(MoeGpu, SwigluBackwardWithFp8RowsEncodesItsGradient) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 1000, k = 4, experts = 16, copies = tokens * k;
  const Routed r = route({RouterScore::softmax, static_cast<int>(k), true, 1.0},
                         random_tensor({tokens, experts}, DType::f32, 70));
  Tensor off = Tensor::empty({experts + 1}, DType::i32, Device::cuda());
  Tensor rows = Tensor::empty({tokens, k}, DType::i32, Device::cuda());
  Tensor toks = Tensor::empty({copies}, DType::i32, Device::cuda());
  moe_permute(gpu(r.experts), experts, off, rows, toks);
  Tensor rw = Tensor::empty({copies}, DType::f32, Device::cuda());
  moe_weights_to_rows(gpu(r.weights), rows, rw);
  for (const int64_t hidden : {384, 256, 72}) {
    SCOPED_TRACE(hidden);
    const Tensor gate_up = gpu(random_tensor({copies, 2 * hidden}, DType::bf16, 71));
    const Tensor da = gpu(random_tensor({copies, hidden}, DType::bf16, 72));
    const auto empty = [](Shape shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cuda()); };
    Tensor dgu = empty(gate_up.shape(), DType::bf16), act_w = empty(da.shape(), DType::bf16);
    Tensor dw = empty({tokens, k}, DType::f32);
    moe_swiglu_backward(da, gate_up, rw, rows, dgu, act_w, dw);
    Tensor dgu8 = empty(gate_up.shape(), DType::bf16), act_w8 = empty(da.shape(), DType::bf16);
    Tensor dw8 = empty({tokens, k}, DType::f32), values = empty(gate_up.shape(), DType::f8e4m3);
    Tensor scales = empty(fp8_rows_scales_shape(gate_up.shape()), DType::f32);
    moe_swiglu_backward_fp8_rows(da, gate_up, rw, rows, dgu8, act_w8, dw8, values, scales);
    EXPECT_EQ(bytes_of(dgu8), bytes_of(dgu));
    EXPECT_EQ(bytes_of(act_w8), bytes_of(act_w));
    EXPECT_EQ(bytes_of(dw8), bytes_of(dw));
    Tensor gv = empty(values.shape(), DType::f8e4m3), gs = empty(scales.shape(), DType::f32);
    quantize_fp8_rows(dgu, gv, gs);
    EXPECT_EQ(bytes_of(values), bytes_of(gv));
    EXPECT_EQ(bytes_of(scales), bytes_of(gs));
    const Tensor cpu_dgu = dgu.to(Device::cpu());
    Tensor cv = Tensor::empty(values.shape(), DType::f8e4m3), cs = Tensor::empty(scales.shape(), DType::f32);
    quantize_fp8_rows(cpu_dgu, cv, cs);
    EXPECT_EQ(bytes_of(values), bytes_of(cv));
    EXPECT_EQ(bytes_of(scales), bytes_of(cs));
  }
}

// Routing of `tokens` tokens, four distinct experts of 16 each: token t's slot j to
// (t stride + 5 j) % m, token 0's last slot to expert 15 (one row); experts m .. 14
// get none.
Tensor four_of_sixteen(int64_t tokens, int stride, int m) {
  std::vector<int32_t> e(static_cast<size_t>(tokens * 4));
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < 4; ++j) e[t * 4 + j] = static_cast<int32_t>((t * stride + 5 * j) % m);
  e[3] = 15;
  return Tensor::from_vector(e, {tokens, 4});
}

struct DownBackward {
  Tensor dgate_up, act_w, dweights;
};

// The down projection's input gradient through the SwiGLU's backward in one call
// (the product's epilogue on a Hopper card where H is a multiple of 128: H = 384, 256;
// H = 72 runs the product, then the pass), against the float64 product and pass on the
// same rounded inputs, no less accurate than the GPU's two ops (which round da to
// bf16 between them), and the same bits on a second run.
TEST(MoeGpu, DownBackwardWithTheSwigluInItsEpilogueMatchesFloat64) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 1001, k = 4, experts = 16, copies = tokens * k, dim = 192;
  Tensor off = Tensor::empty({experts + 1}, DType::i32), rows = Tensor::empty({tokens, k}, DType::i32);
  Tensor toks = Tensor::empty({copies}, DType::i32);
  moe_permute(four_of_sixteen(tokens, 1, 13), experts, off, rows, toks);
  Tensor rw = Tensor::empty({copies}, DType::f32);
  moe_weights_to_rows(random_tensor({tokens, k}, DType::f32, 80), rows, rw);
  const Tensor goff = gpu(off), grows = gpu(rows), grw = gpu(rw);
  const auto empty = [](Shape shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cuda()); };
  for (const int64_t hidden : {384, 256, 72}) {
    SCOPED_TRACE(hidden);
    const Tensor douts = random_tensor({copies, dim}, DType::bf16, 81);
    const Tensor w = random_tensor({experts, dim, hidden}, DType::bf16, 82, 0.1f);
    const Tensor gate_up = random_tensor({copies, 2 * hidden}, DType::bf16, 83);
    Tensor da64 = Tensor::zeros({copies, hidden}, DType::f64);
    grouped_gemm_backward_input(douts.to(DType::f64), w.to(DType::f64), off, da64);
    DownBackward want{Tensor::empty(gate_up.shape(), DType::f64), Tensor::empty(da64.shape(), DType::f64),
                      Tensor::empty({tokens, k}, DType::f64)};
    moe_swiglu_backward(da64, gate_up.to(DType::f64), rw.to(DType::f64), rows, want.dgate_up, want.act_w,
                        want.dweights);
    const auto fused = [&] {
      DownBackward got{empty(gate_up.shape(), DType::bf16), empty({copies, hidden}, DType::bf16),
                       empty({tokens, k}, DType::f32)};
      Tensor scratch = empty({copies, hidden}, DType::bf16);
      moe_down_backward_swiglu(gpu(douts), gpu(w), goff, gpu(gate_up), grw, grows, scratch, got.dgate_up, got.act_w,
                               got.dweights);
      return got;
    };
    const DownBackward got = fused(), again = fused();
    Tensor da = empty({copies, hidden}, DType::bf16);
    grouped_gemm_backward_input(gpu(douts), gpu(w), goff, da);
    DownBackward two{empty(gate_up.shape(), DType::bf16), empty({copies, hidden}, DType::bf16),
                     empty({tokens, k}, DType::f32)};
    moe_swiglu_backward(da, gpu(gate_up), grw, grows, two.dgate_up, two.act_w, two.dweights);
    for (const auto& [name, g, a, t, ref] :
         {std::tuple{"dgate_up", got.dgate_up, again.dgate_up, two.dgate_up, want.dgate_up},
          std::tuple{"act_w", got.act_w, again.act_w, two.act_w, want.act_w},
          std::tuple{"dweights", got.dweights, again.dweights, two.dweights, want.dweights}}) {
      const double err = testing::relative_error(g.to(Device::cpu()), ref);
      const double two_err = testing::relative_error(t.to(Device::cpu()), ref);
      std::cout << name << " H " << hidden << ": rel err " << err << " (two ops " << two_err << ")\n";
      EXPECT_LT(err, 1e-2) << name;
      EXPECT_LE(err, 1.1 * two_err + 1e-6) << name;
      EXPECT_EQ(bytes_of(g), bytes_of(a)) << name << ": a second run gave other bits";
    }
  }
}

// One capture of the call, replayed with three routings written into its offsets, rows
// and weights, matches eager calls on each routing bit for bit.
TEST(MoeGpu, DownBackwardCapturedOnceReplaysAnyRouting) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 600, k = 4, experts = 16, copies = tokens * k, dim = 128, hidden = 256;
  const Tensor douts = gpu(random_tensor({copies, dim}, DType::bf16, 90));
  const Tensor w = gpu(random_tensor({experts, dim, hidden}, DType::bf16, 91, 0.1f));
  const Tensor gate_up = gpu(random_tensor({copies, 2 * hidden}, DType::bf16, 92));
  const auto empty = [](Shape shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cuda()); };
  Tensor off = empty({experts + 1}, DType::i32), rows = empty({tokens, k}, DType::i32);
  Tensor rw = empty({copies}, DType::f32);
  const auto make = [&] {
    return DownBackward{Tensor::zeros(gate_up.shape(), DType::bf16, Device::cuda()),
                        Tensor::zeros({copies, hidden}, DType::bf16, Device::cuda()),
                        Tensor::zeros({tokens, k}, DType::f32, Device::cuda())};
  };
  Tensor scratch = empty({copies, hidden}, DType::bf16);
  const auto run = [&](DownBackward& o) {
    moe_down_backward_swiglu(douts, w, off, gate_up, rw, rows, scratch, o.dgate_up, o.act_w, o.dweights);
  };
  DownBackward captured = make();
  cuda::begin_capture();
  run(captured);
  void* graph = cuda::end_capture();
  uint64_t seed = 93;
  for (const auto& [stride, m] : {std::pair{1, 13}, std::pair{3, 11}, std::pair{0, 16}}) {
    Tensor o = Tensor::empty({experts + 1}, DType::i32), r = Tensor::empty({tokens, k}, DType::i32);
    Tensor t = Tensor::empty({copies}, DType::i32), weights = Tensor::empty({copies}, DType::f32);
    moe_permute(four_of_sixteen(tokens, stride, m), experts, o, r, t);
    moe_weights_to_rows(random_tensor({tokens, k}, DType::f32, seed++), r, weights);
    off.copy_from(o), rows.copy_from(r), rw.copy_from(weights);
    cuda::launch_graph(graph);
    DownBackward eager = make();
    run(eager);
    cuda::synchronize();
    EXPECT_EQ(bytes_of(captured.dgate_up), bytes_of(eager.dgate_up)) << "routing " << stride;
    EXPECT_EQ(bytes_of(captured.act_w), bytes_of(eager.act_w)) << "routing " << stride;
    EXPECT_EQ(bytes_of(captured.dweights), bytes_of(eager.dweights)) << "routing " << stride;
  }
  cuda::destroy_graph(graph);
}

// The gather that also writes the rows' FP8 codes copies moe_gather's bytes, and its
// codes are the CPU's quantize_fp8_rows of the gathered rows: widths of 3 and 10
// 128-wide blocks (one and two rounds of loads in flight) run the one pass, 72 the two.
TEST(MoeGpu, GatherWithFp8RowsEncodesTheGatheredRows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 900, copies = 2700;
  const Tensor toks = scattered_tokens(copies, tokens, 53);
  for (const int64_t width : {768, 1280, 72}) {
    SCOPED_TRACE(width);
    const Tensor x = random_tensor({tokens, width}, DType::bf16, 73);
    Tensor xs = Tensor::empty({copies, width}, DType::bf16);
    moe_gather(x, toks, xs);
    Tensor values = Tensor::empty(xs.shape(), DType::f8e4m3);
    Tensor scales = Tensor::empty(fp8_rows_scales_shape(xs.shape()), DType::f32);
    quantize_fp8_rows(xs, values, scales);
    Tensor gxs = Tensor::empty(xs.shape(), DType::bf16, Device::cuda());
    Tensor gvalues = Tensor::empty(values.shape(), DType::f8e4m3, Device::cuda());
    Tensor gscales = Tensor::empty(scales.shape(), DType::f32, Device::cuda());
    moe_gather_fp8_rows(gpu(x), gpu(toks), gxs, gvalues, gscales);
    EXPECT_EQ(bytes_of(gxs), bytes_of(xs));
    EXPECT_EQ(bytes_of(gvalues), bytes_of(values));
    EXPECT_EQ(bytes_of(gscales), bytes_of(scales));
  }
}

// Rows narrower than a warp's units take a thread per unit, with the widest unit the
// row allows: FP8 scales (six floats: 8-byte units), three floats (4-byte), three bf16
// (2-byte) and five e4m3 codes (1-byte); every byte as the CPU's gather.
TEST(MoeGpu, GatherOfNarrowRowsMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 700, copies = 2100;
  const Tensor toks = scattered_tokens(copies, tokens, 37);
  for (const auto& [dtype, width] : {std::pair{DType::f32, 6}, {DType::f32, 3}, {DType::bf16, 3}, {DType::f8e4m3, 5}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " x " + std::to_string(width));
    const Tensor x = random_tensor({tokens, width}, DType::f32, 64).to(dtype);
    Tensor xs = Tensor::empty({copies, width}, dtype), gxs = Tensor::empty({copies, width}, dtype, Device::cuda());
    moe_gather(x, toks, xs);
    moe_gather(gpu(x), gpu(toks), gxs);
    EXPECT_EQ(bytes_of(gxs), bytes_of(xs));
  }
}

// The router gradient's two 16-bit terms: the first is dlogits^T rounded as a cast
// rounds it, the two together hold it to 16 bits of mantissa.
TEST(MoeRouterGradPair, TermsAreTheRoundedValueAndWhatItLeft) {
  const Tensor d = random_tensor({50, 37}, DType::f32, 71);
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor pair = Tensor::empty({74, 50}, dtype);
    moe_router_grad_pair(d, pair);
    const std::vector<double> dt = d.transpose(0, 1).contiguous().to_doubles();
    EXPECT_EQ(bytes_of(pair.slice(0, 0, 37)), bytes_of(d.transpose(0, 1).contiguous().to(dtype)));
    const std::vector<double> high = pair.slice(0, 0, 37).to_doubles(), low = pair.slice(0, 37, 74).to_doubles();
    // f16's second term may be subnormal: half its spacing there, 2^-25, bounds it too.
    const double relative = dtype == DType::bf16 ? std::ldexp(1.0, -16) : std::ldexp(1.0, -21);
    const double absolute = dtype == DType::bf16 ? 0.0 : std::ldexp(1.0, -25);
    for (size_t i = 0; i < dt.size(); ++i)
      ASSERT_LE(std::fabs(high[i] + low[i] - dt[i]), relative * std::fabs(dt[i]) + absolute) << "element " << i;
  }
  Tensor wrong = Tensor::empty({37, 50}, DType::bf16);
  EXPECT_THROW(moe_router_grad_pair(d, wrong), Error);
}

TEST(MoeGpu, RouterGradPairMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Tensor d = random_tensor({1000, 70}, DType::f32, 72);
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor pair = Tensor::empty({140, 1000}, dtype), gpair = Tensor::empty({140, 1000}, dtype, Device::cuda());
    moe_router_grad_pair(d, pair);
    moe_router_grad_pair(gpu(d), gpair);
    EXPECT_EQ(bytes_of(gpair), bytes_of(pair)) << dtype_name(dtype);
  }
}

// The ops that write FP8 row codes beside their rows name codes of the wrong shape, on
// the CPU (the two-op path) as on a GPU.
TEST(MoeRoute, Fp8RowCodesOfTheWrongShapeAreNamed) {
  const Tensor x = random_tensor({4, 256}, DType::bf16, 43), toks = scattered_tokens(8, 4, 3);
  Tensor xs = Tensor::empty({8, 256}, DType::bf16), values = Tensor::empty({8, 128}, DType::f8e4m3);
  Tensor scales = Tensor::empty({8, 2}, DType::f32);
  try {
    moe_gather_fp8_rows(x, toks, xs, values, scales);
    ADD_FAILURE() << "codes [8, 128] of rows [8, 256] were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_gather_fp8_rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[8, 128]"), std::string::npos) << e.what();
  }
  const Tensor da = random_tensor({8, 128}, DType::bf16, 44), gate_up = random_tensor({8, 256}, DType::bf16, 45);
  const Tensor row_weights = random_tensor({8}, DType::f32, 46);
  const Tensor slot_rows = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor dgate_up = Tensor::empty({8, 256}, DType::bf16), act_w = Tensor::empty({8, 128}, DType::bf16);
  Tensor dweights = Tensor::empty({4, 2}, DType::f32), codes = Tensor::empty({8, 256}, DType::f8e4m3);
  Tensor one_scale = Tensor::empty({8, 1}, DType::f32);
  try {
    moe_swiglu_backward_fp8_rows(da, gate_up, row_weights, slot_rows, dgate_up, act_w, dweights, codes, one_scale);
    ADD_FAILURE() << "scales [8, 1] of dgate_up [8, 256] were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_swiglu_backward_fp8_rows"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[8, 1]"), std::string::npos) << e.what();
  }
}

TEST(MoeRoute, BadShapesAreNamed) {
  const Tensor logits = random_tensor({3, 4}, DType::f32, 41);
  Tensor scores = Tensor::empty({3, 4}, DType::f32), experts = Tensor::empty({3, 2}, DType::i32);
  Tensor weights = Tensor::empty({3, 2}, DType::f32);
  try {
    moe_route_forward({RouterScore::softmax, 5, true, 1.0}, logits, Tensor(), scores, experts, weights);
    ADD_FAILURE() << "top_k 5 of 4 experts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_k 5 must be between 1 and the 4 experts"), std::string::npos) << e.what();
  }
  const Tensor half = random_tensor({3, 4}, DType::bf16, 42);
  EXPECT_THROW(moe_route_forward({RouterScore::softmax, 2, true, 1.0}, half, Tensor(), scores, experts, weights),
               Error);
  Tensor offsets = Tensor::empty({3}, DType::i32), rows = Tensor::empty({3, 2}, DType::i32);
  Tensor toks = Tensor::empty({6}, DType::i32);
  const Tensor wrong = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0, 1, 0}, {3, 2});
  try {
    moe_permute(wrong, 2, offsets, rows, toks);
    ADD_FAILURE() << "expert 2 of 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 2 is outside 0 .. 1"), std::string::npos) << e.what();
  }
  // The down projection's backward with the SwiGLU's: weights whose width is not the
  // scratch's H are named with both shapes.
  const Tensor slot_rows = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor off = Tensor::from_vector(std::vector<int32_t>{0, 3, 6}, {3}), scratch = Tensor::empty({6, 4}, DType::f32);
  Tensor dgate_up = Tensor::empty({6, 8}, DType::f32), act_w = Tensor::empty({6, 4}, DType::f32);
  Tensor dweights = Tensor::empty({3, 2}, DType::f32);
  try {
    moe_down_backward_swiglu(random_tensor({6, 5}, DType::f32, 43), random_tensor({2, 5, 3}, DType::f32, 44), off,
                             random_tensor({6, 8}, DType::f32, 45), random_tensor({6}, DType::f32, 46), slot_rows,
                             scratch, dgate_up, act_w, dweights);
    ADD_FAILURE() << "down weights of width 3 against H = 4 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_down_backward_swiglu: output gradient rows [6, 5] and down weights "
                                         "[2, 5, 3] must be [R, D] and [E, D, H] for scratch [6, 4]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace amber
