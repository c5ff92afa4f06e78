#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "amber/core/seq_info.h"
#include "amber/ops/rope.h"
#include "testing.h"

namespace amber {
namespace {

using testing::random_tensor;
using testing::relative_error;

// Rotate-half RoPE in double, straight from the definition.
Tensor reference_rope(const Tensor& x, const std::vector<int32_t>& pos, const RopeTable& table) {
  const auto xs = x.to_doubles();
  const int64_t tokens = x.size(0), heads = x.size(1), dim = x.size(2);
  const int half = table.rotary_dim / 2;
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  double* out = y.data<double>();
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const double* in = xs.data() + (t * heads + h) * dim;
      double* o = out + (t * heads + h) * dim;
      for (int64_t j = 0; j < dim; ++j) o[j] = in[j];
      for (int i = 0; i < half; ++i) {
        const double a = pos[t] * table.inv_freq[i];
        const double c = std::cos(a) * table.attention_scale, s = std::sin(a) * table.attention_scale;
        o[i] = in[i] * c - in[i + half] * s;
        o[i + half] = in[i + half] * c + in[i] * s;
      }
    }
  return y;
}

TEST(Rope, ForwardMatchesFloat64ForEveryScaling) {
  const SeqInfo seq = SeqInfo::from_lengths({5, 1, 40, 17});
  const std::vector<int32_t> pos(seq.positions.data<int32_t>(), seq.positions.data<int32_t>() + seq.total_tokens);
  const Tensor x = random_tensor({seq.total_tokens, 3, 32}, DType::f64, 1);
  for (RopeScaling scaling : {RopeScaling::none, RopeScaling::linear, RopeScaling::ntk, RopeScaling::yarn}) {
    for (double partial : {1.0, 0.5}) {
      RopeConfig cfg;
      cfg.head_dim = 32;
      cfg.theta = 1e4;
      cfg.partial = partial;
      cfg.scaling = scaling;
      cfg.factor = scaling == RopeScaling::none ? 1.0 : 4.0;
      cfg.original_context = 64;
      const RopeTable table(cfg);
      const Tensor ref = reference_rope(x, pos, table);
      for (DType dt : {DType::f32, DType::bf16}) {
        Tensor y = Tensor::empty(x.shape(), dt);
        rope_forward(x.to(dt), seq.positions, table, y);
        const double err = relative_error(y, ref);
        EXPECT_LT(err, dt == DType::f32 ? 1e-6 : 1e-2) << "scaling " << static_cast<int>(scaling);
      }
    }
  }
}

TEST(Rope, ScalingRulesResolveFrequencies) {
  RopeConfig cfg;
  cfg.head_dim = 64;
  cfg.theta = 1e4;
  const RopeTable plain(cfg);
  EXPECT_DOUBLE_EQ(plain.inv_freq[0], 1.0);
  EXPECT_NEAR(plain.inv_freq[1], std::pow(1e4, -2.0 / 64), 1e-15);
  cfg.scaling = RopeScaling::linear;
  cfg.factor = 4;
  EXPECT_NEAR(RopeTable(cfg).inv_freq[5], plain.inv_freq[5] / 4, 1e-15);
  cfg.scaling = RopeScaling::ntk;
  const RopeTable ntk(cfg);
  EXPECT_DOUBLE_EQ(ntk.inv_freq[0], 1.0);  // the highest frequency is untouched
  // ...and the lowest one (i = d/2 - 1) is interpolated by exactly the factor.
  EXPECT_NEAR(ntk.inv_freq[31], plain.inv_freq[31] / 4, 1e-12 * plain.inv_freq[31]);
  cfg.scaling = RopeScaling::yarn;
  cfg.original_context = 4096;
  const RopeTable yarn(cfg);
  EXPECT_DOUBLE_EQ(yarn.inv_freq[0], plain.inv_freq[0]);                // extrapolated band
  EXPECT_NEAR(yarn.inv_freq[31], plain.inv_freq[31] / 4, 1e-18);       // interpolated band
  EXPECT_NEAR(yarn.attention_scale, 0.1 * std::log(4.0) + 1.0, 1e-15);
  cfg.partial = 0.3;  // 19.2 channels: not even
  EXPECT_THROW(RopeTable{cfg}, Error);
}

TEST(Rope, BackwardMatchesFiniteDifferencesAndPositionsRestartPerDocument) {
  const SeqInfo seq = SeqInfo::from_lengths({3, 6});
  RopeConfig cfg;
  cfg.head_dim = 8;
  cfg.scaling = RopeScaling::yarn;
  cfg.factor = 2;
  cfg.original_context = 4;
  cfg.partial = 0.5;
  const RopeTable table(cfg);
  Tensor x = random_tensor({9, 2, 8}, DType::f64, 2);
  const Tensor proj = random_tensor(x.shape(), DType::f64, 3);
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  auto loss = [&] {
    rope_forward(x, seq.positions, table, y);
    return testing::project(y, proj);
  };
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  rope_backward(proj, seq.positions, table, dx);
  EXPECT_LT(testing::finite_difference_error(x, dx, loss, 40), 1e-5);
  // Token 3 starts document 2 at position 0: its rotation is the identity (times
  // the YaRN scale on the rotated channels).
  rope_forward(x, seq.positions, table, y);
  EXPECT_NEAR(y.item(3 * 16 + 0), x.item(3 * 16 + 0) * table.attention_scale, 1e-15);
  EXPECT_EQ(y.item(3 * 16 + 7), x.item(3 * 16 + 7));  // pass-through channel
}

// QK-norm fused with RoPE (one pass per head row): q and k as token-strided
// heads of one stacked tensor, each side with its own gain, against float64 from the
// definition, and the backward (dq and dk into the stacked gradient, the gains'
// gradients) against finite differences.
TEST(Rope, QkNormRopeNormalisesThenRotatesEachSide) {
  const SeqInfo seq = SeqInfo::from_lengths({5, 4});
  RopeConfig cfg;
  cfg.head_dim = 8;
  const RopeTable table(cfg);
  const int64_t tokens = 9, d = 8;
  Tensor stack = random_tensor({tokens, 5, d}, DType::f64, 20);  // q: heads 0-2, k: 3, v: 4
  Tensor wq = random_tensor({d}, DType::f64, 21, 0.2f, 1.0f), wk = random_tensor({d}, DType::f64, 22, 0.2f, 1.0f);
  const auto forward = [&](QkNormRopeForward& q, QkNormRopeForward& k) {
    q = {stack.slice(1, 0, 3), wq, 1e-6, Tensor::empty({tokens, 3, d}, DType::f64),
         Tensor::empty({tokens * 3}, DType::f64)};
    k = {stack.slice(1, 3, 4), wk, 1e-6, Tensor::empty({tokens, 1, d}, DType::f64), Tensor::empty({tokens}, DType::f64)};
    qk_norm_rope_forward(q, k, seq.positions, table);
  };
  QkNormRopeForward q, k;
  forward(q, k);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) pos[static_cast<size_t>(t)] = seq.positions.data<int32_t>()[t];
  for (const auto& [side, w] : {std::pair{&q, &wq}, std::pair{&k, &wk}}) {
    const Tensor x = side->x.contiguous();
    Tensor normed = Tensor::empty(x.shape(), DType::f64);
    const int64_t rows = x.numel() / d;
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += x.item(r * d + j) * x.item(r * d + j);
      const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
      for (int64_t j = 0; j < d; ++j) normed.data<double>()[r * d + j] = x.item(r * d + j) * inv * w->item(j);
    }
    EXPECT_LT(relative_error(side->y, reference_rope(normed, pos, table)), 1e-14);
  }
  const Tensor proj_q = random_tensor({tokens, 3, d}, DType::f64, 23), proj_k = random_tensor({tokens, 1, d}, DType::f64, 24);
  Tensor dstack = Tensor::zeros(stack.shape(), DType::f64);
  Tensor dwq = Tensor::zeros({d}, DType::f64), dwk = Tensor::zeros({d}, DType::f64);
  qk_norm_rope_backward({proj_q, q.x, wq, q.rstd, dstack.slice(1, 0, 3), dwq},
                        {proj_k, k.x, wk, k.rstd, dstack.slice(1, 3, 4), dwk}, seq.positions, table);
  const auto loss = [&] {
    QkNormRopeForward fq, fk;
    forward(fq, fk);
    return testing::project(fq.y, proj_q) + testing::project(fk.y, proj_k);
  };
  EXPECT_LT(testing::finite_difference_error(stack, dstack, loss, 60), 1e-5);
  EXPECT_LT(testing::finite_difference_error(wq, dwq, loss, 8), 1e-5);
  EXPECT_LT(testing::finite_difference_error(wk, dwk, loss, 8), 1e-5);
  // Bad sides name what is wrong.
  QkNormRopeForward short_rstd = k;
  short_rstd.rstd = Tensor::empty({tokens - 1}, DType::f64);
  EXPECT_THROW(qk_norm_rope_forward(q, short_rstd, seq.positions, table), Error);
  try {
    qk_norm_rope_forward(q, short_rstd, seq.positions, table);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rstd needs 9 elements"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amber
