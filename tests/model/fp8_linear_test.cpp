// The fp8_block Linear recipe: each of its products is the FP8 oracle of ops/fp8_gemm.h
// on the operands quantized as the recipe says (x and dy by rows, W and W^T by tiles,
// dy^T and x^T by rows along the tokens), bit for bit on the CPU, and within FP8's
// rounding of the compute-dtype products; the config refuses it with a bias.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "amber/core/device.h"
#include "amber/core/error.h"
#include "amber/core/seq_info.h"
#include "amber/model/config.h"
#include "amber/model/language_model.h"
#include "amber/model/linear.h"
#include "amber/ops/activation.h"
#include "amber/ops/fp8_gemm.h"
#include "amber/ops/quant.h"
#include "amber/ops/step_slots.h"
#include "ops/testing.h"
#include "tiny_model.h"

namespace amber {
namespace {

struct Quantized {
  Tensor values, scales;
};

Quantized rows(const Tensor& x) {
  Quantized q{Tensor::empty(x.shape(), DType::f8e4m3), Tensor::empty(fp8_rows_scales_shape(x.shape()), DType::f32)};
  quantize_fp8_rows(x, q.values, q.scales);
  return q;
}

Quantized tiles(const Tensor& w) {
  Quantized q{Tensor::empty(w.shape(), DType::f8e4m3), Tensor::empty(fp8_blocks_scales_shape(w.shape()), DType::f32)};
  quantize_fp8_blocks(w, q.values, q.scales);
  return q;
}

Tensor product(const Quantized& a, const Quantized& b, Fp8Scaling scaling) {
  Tensor c = Tensor::empty({a.values.size(0), b.values.size(0)}, DType::f32);
  gemm_fp8(a.values, a.scales, b.values, b.scales, scaling, c);
  return c;
}

Tensor transposed(const Tensor& t) { return t.transpose(0, 1).contiguous(); }

TEST(Fp8BlockRecipe, EachProductIsTheFp8OracleOfItsQuantizedOperands) {
  ParamStore store(Placement{});
  LinearSpec spec{"fp8", 256, 144, false, ParamRole::hidden_matrix, 0.05, kFp8BlockRecipe};
  Linear fp8(store, spec);
  spec.name = "exact";
  spec.recipe = kComputeDtypeRecipe;
  Linear exact(store, spec);
  store.allocate();
  const Tensor w = testing::random_tensor({144, 256}, DType::f32, 1, 0.05f);
  fp8.weight().value.copy_from(w);
  exact.weight().value.copy_from(w);
  store.refresh_working_copies();
  const Tensor x = testing::random_tensor({96, 256}, DType::f32, 2), dy = testing::random_tensor({96, 144}, DType::f32, 3);
  Arena arena;

  const Tensor y = fp8.forward(x, arena), y_exact = exact.forward(x, arena);
  EXPECT_EQ(y.to_doubles(), product(rows(x), tiles(w), Fp8Scaling::tiles).to_doubles());
  const double forward_error = testing::relative_error(y, y_exact);
  EXPECT_GT(forward_error, 1e-3) << "the FP8 path did not run";
  EXPECT_LT(forward_error, 0.1);

  // The gradients start at zero, so the products' sums are the gradients themselves.
  const Tensor dx = fp8.backward(dy, x, arena), dx_exact = exact.backward(dy, x, arena);
  EXPECT_EQ(dx.to_doubles(), product(rows(dy), tiles(transposed(w)), Fp8Scaling::tiles).to_doubles());
  EXPECT_EQ(fp8.weight().grad.to_doubles(),
            product(rows(transposed(dy)), rows(transposed(x)), Fp8Scaling::rows).to_doubles());
  for (const auto& [name, error] : {std::pair{"dx", testing::relative_error(dx, dx_exact)},
                                    std::pair{"dW", testing::relative_error(fp8.weight().grad, exact.weight().grad)}}) {
    EXPECT_GT(error, 1e-3) << name;
    EXPECT_LT(error, 0.1) << name;
  }
}

// The GLU forward is the FP8 product and the activation. The backward: the down
// projection's input gradient dh through W_down^T's tiles and its weight gradient from
// dy^T and h^T by rows along the tokens (dy quantized once into both layouts); dgate_up
// = the GLU's backward of dh, quantized once into the rows and columns that the gate/up
// projection's dx (through W_gate_up^T's tiles) and weight gradient read.
TEST(Fp8BlockRecipe, GluProductsAreTheFp8OraclesAroundTheActivation) {
  ParamStore store(Placement{});
  GluLinear gate_up(store, {"gate_up", 128, 2 * 160, false, ParamRole::hidden_matrix, 0.05, kFp8BlockRecipe},
                    Glu::swiglu);
  Linear down(store, {"down", 160, 128, false, ParamRole::hidden_matrix, 0.05, kFp8BlockRecipe});
  store.allocate();
  for (const auto& p : store.params()) p->value.copy_from(testing::random_tensor(p->value.shape(), DType::f32, 4, 0.05f));
  store.refresh_working_copies();
  const Tensor x = testing::random_tensor({64, 128}, DType::f32, 5), dy = testing::random_tensor({64, 128}, DType::f32, 6);
  Arena arena;
  Tensor gu = Tensor::empty({64, 320}, DType::f32), h = Tensor::empty({64, 160}, DType::f32);
  gate_up.forward(x, gu, h, arena);
  const Tensor w_gate_up = store.params()[0]->value, w_down = store.params()[1]->value;
  EXPECT_EQ(gu.to_doubles(), product(rows(x), tiles(w_gate_up), Fp8Scaling::tiles).to_doubles());
  Tensor expected_h = Tensor::empty(h.shape(), DType::f32);
  swiglu_forward(gu, expected_h);
  EXPECT_EQ(h.to_doubles(), expected_h.to_doubles());

  const Tensor dx = gate_up.backward(down, dy, {x, gu, h}, arena);
  EXPECT_EQ(down.weight().grad.to_doubles(),
            product(rows(transposed(dy)), rows(transposed(h)), Fp8Scaling::rows).to_doubles());
  const Tensor dh = product(rows(dy), tiles(transposed(w_down)), Fp8Scaling::tiles);
  Tensor dgu = Tensor::empty(gu.shape(), DType::f32);
  swiglu_backward(dh, gu, dgu);
  EXPECT_EQ(dx.to_doubles(), product(rows(dgu), tiles(transposed(w_gate_up)), Fp8Scaling::tiles).to_doubles());
  EXPECT_EQ(gate_up.weight().grad.to_doubles(),
            product(rows(transposed(dgu)), rows(transposed(x)), Fp8Scaling::rows).to_doubles());
}

// fp8_block_hp_wgrad: the forward and input-gradient products are fp8_block's, the
// weight gradients the compute_dtype recipe's, bit for bit (the plain projection and
// the gated MLP, whose dgate_up is quantized by rows only).
TEST(Fp8BlockRecipe, HpWgradKeepsFp8ProductsAndTheComputeDtypeWeightGradient) {
  ParamStore store(Placement{});
  LinearSpec spec{"hp", 256, 144, false, ParamRole::hidden_matrix, 0.05, kFp8BlockHpWgradRecipe};
  Linear hp(store, spec);
  spec.name = "exact";
  spec.recipe = kComputeDtypeRecipe;
  Linear exact(store, spec);
  GluLinear gate_up(store, {"gate_up", 128, 2 * 160, false, ParamRole::hidden_matrix, 0.05, kFp8BlockHpWgradRecipe},
                    Glu::swiglu);
  Linear down(store, {"down", 160, 128, false, ParamRole::hidden_matrix, 0.05, kFp8BlockHpWgradRecipe});
  Linear exact_gate_up(store, {"exact_gate_up", 128, 2 * 160, false, ParamRole::hidden_matrix, 0.05, kComputeDtypeRecipe});
  Linear exact_down(store, {"exact_down", 160, 128, false, ParamRole::hidden_matrix, 0.05, kComputeDtypeRecipe});
  store.allocate();
  const auto& params = store.params();  // hp, exact, gate_up, down, exact_gate_up, exact_down
  for (const auto& p : params) p->value.copy_from(testing::random_tensor(p->value.shape(), DType::f32, 12, 0.05f));
  store.refresh_working_copies();
  Arena arena;

  const Tensor x = testing::random_tensor({96, 256}, DType::f32, 7), dy = testing::random_tensor({96, 144}, DType::f32, 8);
  const Tensor w = params[0]->value;
  EXPECT_EQ(hp.forward(x, arena).to_doubles(), product(rows(x), tiles(w), Fp8Scaling::tiles).to_doubles());
  const Tensor dx = hp.backward(dy, x, arena);
  exact.backward(dy, x, arena);
  EXPECT_EQ(dx.to_doubles(), product(rows(dy), tiles(transposed(w)), Fp8Scaling::tiles).to_doubles());
  EXPECT_EQ(hp.weight().grad.to_doubles(), exact.weight().grad.to_doubles());

  const Tensor gx = testing::random_tensor({64, 128}, DType::f32, 9), gdy = testing::random_tensor({64, 128}, DType::f32, 11);
  Tensor gu = Tensor::empty({64, 320}, DType::f32), h = Tensor::empty({64, 160}, DType::f32);
  gate_up.forward(gx, gu, h, arena);
  const Tensor gdx = gate_up.backward(down, gdy, {gx, gu, h}, arena);
  const Tensor w_gate_up = params[2]->value, w_down = params[3]->value;
  exact_down.backward(gdy, h, arena);
  EXPECT_EQ(down.weight().grad.to_doubles(), exact_down.weight().grad.to_doubles());
  const Tensor dh = product(rows(gdy), tiles(transposed(w_down)), Fp8Scaling::tiles);
  Tensor dgu = Tensor::empty(gu.shape(), DType::f32);
  swiglu_backward(dh, gu, dgu);
  EXPECT_EQ(gdx.to_doubles(), product(rows(dgu), tiles(transposed(w_gate_up)), Fp8Scaling::tiles).to_doubles());
  exact_gate_up.backward(dgu, gx, arena);
  EXPECT_EQ(gate_up.weight().grad.to_doubles(), exact_gate_up.weight().grad.to_doubles());
}

// Routed experts with model.expert_recipe = fp8_block_hp_wgrad (on the CPU the FP8
// products' float64 oracle): one forward and backward tracks the compute-dtype experts'
// loss and gradients within FP8's rounding, and differs from them (the FP8 products ran).
TEST(Fp8Experts, TrackTheComputeDtypeExperts) {
  ModelConfig config = testing::with_small_moe(testing::tiny_model());
  LanguageModel exact(config);
  config.expert_recipe = kFp8BlockHpWgradRecipe;
  LanguageModel fp8(config);
  exact.init_weights(3);
  fp8.init_weights(3);
  const SeqInfo seq = SeqInfo::from_lengths({40, 24});
  const Tensor u = testing::random_tensor({64}, DType::f64, 4, 1.0f);
  std::vector<int32_t> tokens(64), targets(64, -100);
  for (int t = 0; t < 64; ++t) tokens[t] = static_cast<int32_t>(std::abs(u.item(t)) * 1000) % config.vocab_size;
  for (int t = 0; t + 1 < 64; ++t)
    if (t != 39) targets[t] = tokens[t + 1];
  const Tensor token_ids = Tensor::from_vector(tokens, {64}), target_ids = Tensor::from_vector(targets, {64});
  auto loss = [&](LanguageModel& model) {
    Tensor sums = Tensor::zeros({step_slot::objective_end - step_slot::objective_begin}, DType::f64);
    model.forward_backward(token_ids, target_ids, seq, Tensor::full({1}, 1.0, DType::f64), sums);
    return sums.to_doubles()[step_slot::loss_sum];
  };
  const double exact_loss = loss(exact), fp8_loss = loss(fp8);
  EXPECT_NE(fp8_loss, exact_loss) << "the FP8 experts did not run";
  EXPECT_NEAR(fp8_loss / exact_loss, 1.0, 1e-2);
  for (size_t i = 0; i < exact.params().size(); ++i) {
    const Param& p = *fp8.params()[i];
    const double error = testing::relative_error(p.grad, exact.params()[i]->grad);
    EXPECT_LT(error, 0.1) << p.name;
    if (p.name.find(".experts.") != std::string::npos) {
      EXPECT_GT(error, 1e-4) << p.name;
    }
  }
}

// On a GPU a token count that is not a multiple of 16 is padded with zero rows: the
// results equal those of the same rows padded by hand, bit for bit (forward, input
// gradient and weight gradient).
TEST(Fp8BlockRecipeGpu, PaddedRowsGiveTheResultsOfExplicitZeroRows) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda();
  ParamStore store({DType::f32, gpu, DType::bf16});
  Linear linear(store, {"p", 256, 144, false, ParamRole::hidden_matrix, 0.05, kFp8BlockRecipe});
  store.allocate();
  Param& w = linear.weight();
  w.value.copy_from(testing::random_tensor({144, 256}, DType::f32, 1, 0.05f).to(gpu));
  store.refresh_working_copies();
  const auto rows_of_zeros = [&](const Tensor& t, int64_t rows) {
    Tensor out = Tensor::zeros({rows, t.size(1)}, DType::bf16, gpu);
    Tensor head = out.slice(0, 0, t.size(0));
    head.copy_from(t);
    return out;
  };
  const Tensor x = testing::random_tensor({37, 256}, DType::bf16, 2).to(gpu);
  const Tensor dy = testing::random_tensor({37, 144}, DType::bf16, 3).to(gpu);
  const Tensor x48 = rows_of_zeros(x, 48), dy48 = rows_of_zeros(dy, 48);
  const auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_doubles(); };
  Arena arena(gpu);
  EXPECT_EQ(host(linear.forward(x, arena)), host(linear.forward(x48, arena).slice(0, 0, 37)));
  *w.stale_grad = true;
  const Tensor dx = linear.backward(dy, x, arena);
  const std::vector<double> grad = host(w.grad);
  *w.stale_grad = true;
  const Tensor dx48 = linear.backward(dy48, x48, arena);
  EXPECT_EQ(host(dx), host(dx48.slice(0, 0, 37)));
  EXPECT_EQ(grad, host(w.grad));
}

// validate()'s error for `c`, or "" when it accepts c.
std::string validation_error(const ModelConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8BlockRecipe, ConfigTakesItPerGroupAndRefusesItWithABias) {
  ModelConfig c = testing::tiny_model();
  c.attention_recipe = kFp8BlockRecipe;
  c.mlp_recipe = kFp8BlockRecipe;
  EXPECT_EQ(validation_error(c), "");
  c.attn_bias = true;
  EXPECT_NE(validation_error(c).find("model.attention_recipe = 'fp8_block' has no projection bias yet"),
            std::string::npos)
      << validation_error(c);
  c.attn_bias = false;
  c.expert_recipe = kFp8BlockRecipe;
  EXPECT_NE(validation_error(c).find("model.expert_recipe = 'fp8_block' is not one of: compute_dtype, "
                                     "fp8_block_hp_wgrad (the routed experts' weight gradients"),
            std::string::npos)
      << validation_error(c);
  c.expert_recipe = kFp8BlockHpWgradRecipe;
  EXPECT_EQ(validation_error(c), "");
  c.mlp_recipe = "fp7";
  EXPECT_NE(validation_error(c).find("model.mlp_recipe = 'fp7' is not a linear recipe; valid: compute_dtype, "
                                     "fp8_block"),
            std::string::npos)
      << validation_error(c);
}

}  // namespace
}  // namespace amber
