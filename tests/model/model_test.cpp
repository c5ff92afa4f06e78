#include <gtest/gtest.h>

#include "amber/core/seq_info.h"
#include "amber/model/flops.h"
#include "amber/model/language_model.h"
#include "amber/ops/step_slots.h"
#include "ops/testing.h"
#include "tiny_model.h"

namespace amber {
namespace {

// The tiny model at half width, small enough for f64 finite differences.
ModelConfig tiny(int kv_heads = 2) {
  ModelConfig c = testing::tiny_model();
  c.vocab_size = 41;
  c.dim = 16;
  c.kv_heads = kv_heads;
  c.mlp_hidden = 24;
  c.init_std = 0.3;  // larger than usual so every path carries a real gradient
  c.loss_chunk_tokens = 5;
  return c;
}

struct Batch {
  Tensor tokens, targets;
  SeqInfo seq;
};

// Documents of the given lengths with Philox-derived tokens; next-token targets
// inside each document, none for its last token.
Batch make_batch(const std::vector<int32_t>& lengths, int vocab, uint64_t seed) {
  Batch b;
  b.seq = SeqInfo::from_lengths(lengths);
  Tensor u = Tensor::empty({b.seq.total_tokens}, DType::f64);
  fill_uniform(u, seed, 0);
  std::vector<int32_t> tokens(b.seq.total_tokens), targets(b.seq.total_tokens, -100);
  for (int64_t t = 0; t < b.seq.total_tokens; ++t) tokens[t] = static_cast<int32_t>(u.item(t) * vocab);
  for (int d = 0; d < b.seq.num_docs; ++d)
    for (int32_t t = b.seq.doc_start(d); t + 1 < b.seq.doc_start(d) + b.seq.doc_length(d); ++t)
      targets[t] = tokens[t + 1];
  b.tokens = Tensor::from_vector(tokens, {b.seq.total_tokens});
  b.targets = Tensor::from_vector(targets, {b.seq.total_tokens});
  return b;
}

// Forward and backward of one batch; its summed objective (the head's loss and the
// routers' auxiliary losses) read back from the device sums.
double forward_backward_loss(LanguageModel& model, const Batch& b, double loss_scale) {
  Tensor sums = Tensor::zeros({step_slot::objective_end - step_slot::objective_begin}, DType::f64, model.device());
  const Tensor scale = Tensor::full({1}, loss_scale, DType::f64).to(model.device());
  model.forward_backward(b.tokens, b.targets, b.seq, scale, sums);
  const std::vector<double> v = sums.to_doubles();
  return v[step_slot::loss_sum] + v[step_slot::router_loss_sum];
}

// Rewriting document 1 of a packed batch changes its logits and leaves every other
// token's bit for bit.
void expect_other_documents_unchanged(const ModelConfig& c) {
  LanguageModel model(c);
  model.init_weights(2);
  Batch b = make_batch({8, 5, 13}, c.vocab_size, 4);
  const std::vector<double> before = model.logits(b.tokens, b.seq).to_doubles();
  int32_t* tok = b.tokens.data<int32_t>();
  for (int32_t t = 8; t < 13; ++t) tok[t] = (tok[t] + 7) % c.vocab_size;  // document 1
  const std::vector<double> after = model.logits(b.tokens, b.seq).to_doubles();
  const size_t v = static_cast<size_t>(c.vocab_size);
  size_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const size_t token = i / v;
    if (token >= 8 && token < 13) {
      changed += before[i] != after[i];
    } else {
      ASSERT_EQ(before[i], after[i]) << "token " << token;
    }
  }
  EXPECT_GT(changed, 0u);
}

// The objective differentiated is the training one: the head's loss and the MoE
// routers' auxiliary losses (forward_backward's sums; its gradients are kept first, as
// every evaluation adds to them).
void expect_gradients_match_finite_differences(const ModelConfig& config) {
  LanguageModel model(config, DType::f64);
  model.init_weights(7);
  const Batch b = make_batch({5, 1, 9, 3}, config.vocab_size, 3);
  model.zero_grad();
  forward_backward_loss(model, b, 1.0);
  std::vector<Tensor> grads;
  for (const auto& p : model.params()) grads.push_back(p->grad.clone());
  auto loss = [&] { return forward_backward_loss(model, b, 1.0); };
  for (size_t i = 0; i < grads.size(); ++i) {
    const double err = testing::finite_difference_error(model.params()[i]->value, grads[i], loss, 6);
    EXPECT_LT(err, 1e-5) << model.params()[i]->name;
  }
}

TEST(LanguageModel, GradientsMatchFiniteDifferencesDefaultComponents) {
  ModelConfig c = tiny();
  c.attn_sink = true;
  c.sliding_window = 3;  // layer 0 windowed, layer 1 global
  c.z_loss_weight = 1e-2;
  c.rope_scaling = "yarn";
  c.rope_factor = 2.0;
  c.max_position = 8;
  expect_gradients_match_finite_differences(c);
}

TEST(LanguageModel, GradientsMatchFiniteDifferencesAlternativeComponents) {
  ModelConfig c = tiny(1);
  c.norm = "layernorm";
  c.mlp = "gelu";
  c.posenc = "none";
  c.qk_norm_affine = false;
  c.attn_bias = true;
  c.tie_embeddings = true;
  c.post_norm = true;
  c.embedding_scale = true;
  c.scale_residual_by_depth = true;
  c.recompute = "block";
  expect_gradients_match_finite_differences(c);
  c.mlp = "geglu";
  c.qk_norm = false;
  c.rope_partial = 0.5;
  c.posenc = "rope";
  expect_gradients_match_finite_differences(c);
}

// The tiny model with its second layer a Mixture-of-Experts layer: four experts, two
// chosen per token, one shared expert.
ModelConfig tiny_moe(const std::string& router = "softmax") {
  ModelConfig c = tiny();
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 8;
  c.moe_shared_experts = 1;
  c.moe_first_dense = 1;
  c.moe_router = router;
  return c;
}

// The router's gradient included: the finite-difference steps are far below the gaps
// between the scores, so no step changes a token's experts.
TEST(LanguageModel, GradientsMatchFiniteDifferencesMoe) {
  expect_gradients_match_finite_differences(tiny_moe());
  ModelConfig c = tiny_moe("sigmoid");
  c.moe_routed_scaling = 2.5;
  c.moe_shared_experts = 0;
  expect_gradients_match_finite_differences(c);
  c = tiny_moe("sqrt_softplus");
  c.moe_normalize = false;
  c.moe_first_dense = 0;
  c.recompute = "block";
  expect_gradients_match_finite_differences(c);
}

// The sequence-wise balance loss and the router z-loss, each router: their value in the
// objective and their gradient into the router (the choice is held fixed: a finite-
// difference step is far below the gaps between the scores).
TEST(LanguageModel, GradientsMatchFiniteDifferencesMoeRouterLosses) {
  for (const char* router : {"softmax", "sigmoid", "sqrt_softplus"}) {
    SCOPED_TRACE(router);
    ModelConfig c = tiny_moe(router);
    c.moe_balance_loss_weight = 0.3;
    c.moe_z_loss_weight = 0.05;
    expect_gradients_match_finite_differences(c);
  }
}

// The one-line summary the trainer's metrics and `bench step` print: the worst layer (the
// first of equals), the mean ratio, all dead experts, the widest bias spread.
TEST(RoutingSummary, WorstLayerMeanDeadAndSpread) {
  const RoutingSummary none = summarize_routing({});
  EXPECT_EQ(none.worst_max_over_mean, 0.0);
  EXPECT_TRUE(none.worst_layer.empty());
  const RoutingSummary s = summarize_routing({{"layers.1.mlp", 1.5, 0, 0.25},
                                              {"layers.2.mlp", 3.0, 2, 0.5},
                                              {"layers.3.mlp", 3.0, 1, 0.125}});
  EXPECT_EQ(s.worst_max_over_mean, 3.0);
  EXPECT_EQ(s.worst_layer, "layers.2.mlp");
  EXPECT_DOUBLE_EQ(s.mean_max_over_mean, 2.5);
  EXPECT_EQ(s.dead_experts, 3);
  EXPECT_EQ(s.bias_spread, 0.5);
}

// Dropless routing: a token's experts and output depend on that token alone.
TEST(LanguageModel, MoeChangingOneDocumentLeavesOtherLogitsBitIdentical) {
  expect_other_documents_unchanged(tiny_moe());
}

// Renumbering the experts (router rows and expert weights together) changes nothing:
// bit for bit with element-wise scores; with softmax only its denominator's sum over the
// experts changes order (rounding).
void expect_expert_permutation_invariance(const std::string& router, double tolerance) {
  const ModelConfig c = tiny_moe(router);
  LanguageModel model(c);
  model.init_weights(5);
  const Batch b = make_batch({8, 5, 13}, c.vocab_size, 6);
  const std::vector<double> before = model.logits(b.tokens, b.seq).to_doubles();
  const std::vector<int64_t> to = {2, 0, 3, 1};  // expert e moves to to[e]
  int permuted = 0;
  for (const auto& p : model.params()) {
    const bool experts = p->name.find(".experts.") != std::string::npos || p->name.ends_with(".router.weight");
    if (!experts) continue;
    const Tensor old = p->value.clone();
    for (int64_t e = 0; e < 4; ++e) {
      Tensor dst = p->value.select(0, to[static_cast<size_t>(e)]);
      dst.copy_from(old.select(0, e));
    }
    ++permuted;
  }
  ASSERT_EQ(permuted, 3) << "router, gate_up and down of the one MoE layer";
  model.refresh_working_copies();
  const std::vector<double> after = model.logits(b.tokens, b.seq).to_doubles();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) ASSERT_NEAR(after[i], before[i], tolerance) << router << " logit " << i;
}

TEST(LanguageModel, MoeExpertPermutationLeavesLogitsUnchanged) {
  expect_expert_permutation_invariance("sigmoid", 0.0);
  expect_expert_permutation_invariance("softmax", 1e-5);
}

TEST(LanguageModel, BlockRecomputeGivesIdenticalGradients) {
  ModelConfig c = tiny();
  c.attn_sink = true;
  LanguageModel keep(c);
  c.recompute = "block";
  LanguageModel recompute(c);
  keep.init_weights(11);
  recompute.init_weights(11);
  const Batch b = make_batch({7, 12, 2}, c.vocab_size, 5);
  const double l1 = forward_backward_loss(keep, b, 0.5);
  const double l2 = forward_backward_loss(recompute, b, 0.5);
  EXPECT_EQ(l1, l2);
  for (size_t i = 0; i < keep.params().size(); ++i)
    EXPECT_EQ(keep.params()[i]->grad.to_doubles(), recompute.params()[i]->grad.to_doubles())
        << keep.params()[i]->name;
}

// A step's gradients by restart_grads / settle_grads (the linear weights' gradients
// overwritten by their first product, never zeroed) equal zero_grad's, bit for bit,
// over two micro-batches, whatever the gradients held before (NaN here); with no
// micro-batch at all every gradient is zero.
TEST(LanguageModel, RestartedGradientsEqualZeroedOnes) {
  ModelConfig tied = tiny(1);
  tied.tie_embeddings = true;
  tied.attn_bias = true;
  for (const ModelConfig& c : {tiny(), tied}) {
    LanguageModel model(c);
    model.init_weights(13);
    const Batch first = make_batch({6, 9}, c.vocab_size, 8), second = make_batch({4, 1, 7}, c.vocab_size, 9);
    model.zero_grad();
    forward_backward_loss(model, first, 0.5);
    forward_backward_loss(model, second, 0.5);
    std::vector<std::vector<double>> zeroed;
    for (const auto& p : model.params()) zeroed.push_back(p->grad.to_doubles());
    for (const auto& p : model.params()) p->grad.fill(NAN);
    model.restart_grads();
    forward_backward_loss(model, first, 0.5);
    forward_backward_loss(model, second, 0.5);
    model.settle_grads();
    for (size_t i = 0; i < model.params().size(); ++i)
      EXPECT_EQ(model.params()[i]->grad.to_doubles(), zeroed[i]) << model.params()[i]->name;
    for (const auto& p : model.params()) p->grad.fill(NAN);
    model.restart_grads();
    model.settle_grads();
    for (const auto& p : model.params())
      EXPECT_EQ(p->grad.to_doubles(), std::vector<double>(p->grad.numel(), 0.0)) << p->name;
  }
}

TEST(LanguageModel, PackedLossEqualsSumOfDocumentsRunAlone) {
  ModelConfig c = tiny();
  c.sliding_window = 4;
  c.attn_sink = true;
  LanguageModel model(c, DType::f64);
  model.init_weights(1);
  const std::vector<int32_t> lengths = {6, 1, 11, 4};
  const Batch packed = make_batch(lengths, c.vocab_size, 9);
  const LMHead::Loss whole = model.evaluate(packed.tokens, packed.targets, packed.seq);
  double sum = 0;
  int64_t tokens = 0;
  for (int d = 0; d < packed.seq.num_docs; ++d) {
    const int64_t start = packed.seq.doc_start(d), len = packed.seq.doc_length(d);
    const SeqInfo alone = SeqInfo::from_lengths({static_cast<int32_t>(len)});
    const LMHead::Loss part = model.evaluate(packed.tokens.slice(0, start, start + len).contiguous(),
                                             packed.targets.slice(0, start, start + len).contiguous(), alone);
    sum += part.sum;
    tokens += part.tokens;
  }
  EXPECT_EQ(whole.tokens, tokens);
  EXPECT_EQ(whole.tokens, 22 - 4);  // the last token of each document has no target
  EXPECT_NEAR(whole.sum, sum, 1e-12 * std::abs(sum));
}

TEST(LanguageModel, ChangingOneDocumentLeavesOtherLogitsBitIdentical) {
  ModelConfig c = tiny();
  c.attn_sink = true;
  expect_other_documents_unchanged(c);
}

TEST(LanguageModel, WindowLargerThanEveryDocumentEqualsNoWindow) {
  ModelConfig c = tiny();
  LanguageModel global(c);
  c.sliding_window = 64;
  c.global_layer_every = 0;
  LanguageModel windowed(c);
  global.init_weights(3);
  windowed.init_weights(3);
  const Batch b = make_batch({30, 9, 25}, c.vocab_size, 6);
  EXPECT_EQ(global.logits(b.tokens, b.seq).to_doubles(), windowed.logits(b.tokens, b.seq).to_doubles());
}

TEST(LanguageModel, GqaEqualsMhaWithRepeatedKeyValueProjections) {
  const ModelConfig gqa_config = tiny(2);
  LanguageModel gqa(gqa_config, DType::f64);
  LanguageModel mha(tiny(4), DType::f64);
  gqa.init_weights(4);
  const int head_dim = gqa_config.resolved_head_dim(), group = 2;
  for (const auto& p : mha.params()) {
    const Param& src = gqa.param(p->name);
    if (p->name.find("k_proj") == std::string::npos && p->name.find("v_proj") == std::string::npos) {
      p->value.copy_from(src.value);
      continue;
    }
    // MHA head h reads the rows of GQA kv head h / group.
    for (int h = 0; h < 4; ++h) {
      Tensor dst = p->value.slice(0, h * head_dim, (h + 1) * head_dim);
      dst.copy_from(src.value.slice(0, (h / group) * head_dim, (h / group + 1) * head_dim));
    }
  }
  const Batch b = make_batch({10, 3, 7}, gqa_config.vocab_size, 8);
  EXPECT_LT(testing::relative_error(mha.logits(b.tokens, b.seq), gqa.logits(b.tokens, b.seq)), 1e-13);
}

TEST(LanguageModel, ParameterNamesAndCounts) {
  ModelConfig c = tiny();
  c.attn_sink = true;
  LanguageModel model(c);
  EXPECT_NO_THROW(model.param("layers.1.attn.q_proj.weight"));
  EXPECT_NO_THROW(model.param("layers.0.mlp.gate_up_proj.weight"));
  EXPECT_NO_THROW(model.param("layers.0.attn.sinks"));
  EXPECT_NO_THROW(model.param("lm_head.weight"));
  // q, k and v are parameters of their own, stacked in one buffer for one product.
  const Param &q = model.param("layers.1.attn.q_proj.weight"), &k = model.param("layers.1.attn.k_proj.weight");
  const Param& v = model.param("layers.1.attn.v_proj.weight");
  for (const Tensor Param::*t : {&Param::value, &Param::grad, &Param::work}) {
    EXPECT_TRUE((q.*t).shares_storage_with(k.*t) && (k.*t).shares_storage_with(v.*t));
    EXPECT_EQ((k.*t).offset(), (q.*t).offset() + (q.*t).numel());
    EXPECT_EQ((v.*t).offset(), (k.*t).offset() + (k.*t).numel());
  }
  try {
    model.param("layers.1.attn.q_prj.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'layers.1.attn.q_proj.weight'"), std::string::npos);
  }
  // embed + head + per layer (q 16x16, k,v 8x16, o 16x16, q/k norm 4+4, sinks 4,
  // two norms 16+16, gate_up 48x16, down 16x24) + final norm
  const int64_t per_layer = 256 + 128 + 128 + 256 + 8 + 4 + 32 + 768 + 384;
  EXPECT_EQ(model.parameter_count(), 41 * 16 * 2 + 2 * per_layer + 16);
  EXPECT_EQ(model.param("embed_tokens.weight").role, ParamRole::embedding);
  EXPECT_EQ(model.param("layers.0.attn_norm.weight").role, ParamRole::vector);
  EXPECT_EQ(model.param("layers.0.attn.sinks").role, ParamRole::vector);
  EXPECT_EQ(model.param("lm_head.weight").role, ParamRole::head);
  EXPECT_TRUE(model.param("layers.0.attn.o_proj.weight").muon);
  EXPECT_FALSE(model.param("lm_head.weight").muon);
}

TEST(LanguageModel, AnalyticParameterCountMatchesTheBuiltModel) {
  ModelConfig variants[3] = {tiny(), tiny(1), tiny()};
  variants[1].norm = "layernorm";
  variants[1].attn_bias = true;
  variants[1].post_norm = true;
  variants[1].tie_embeddings = true;
  variants[1].mlp = "gelu";
  variants[2].attn_sink = true;
  variants[2].qk_norm_affine = false;
  for (const ModelConfig& c : variants) EXPECT_EQ(count_parameters(c), LanguageModel(c).parameter_count());
}

TEST(LanguageModel, PresetsMatchThePredecessorLadder) {
  const std::pair<const char*, double> rungs[] = {
      {"kohaku-200m", 204e6}, {"kohaku-500m", 546e6}, {"kohaku-1b", 982e6}, {"kohaku-1.5b", 1514e6}};
  for (const auto& [name, total] : rungs) {
    const ModelConfig c = load_model_config(std::string(AMBER_SOURCE_DIR) + "/configs/presets/" + name + ".toml");
    const double count = static_cast<double>(count_parameters(c));
    std::cout << name << ": " << count / 1e6 << "M parameters\n";
    EXPECT_NEAR(count / total, 1.0, 0.005) << name;  // the ladder quotes whole millions
  }
  // The sparse rungs: total and active (what a token passes through: embeddings, head,
  // routers, its top-k and shared experts).
  const std::tuple<const char*, double, double> sparse[] = {{"kohaku-moe-1b", 991e6, 248e6},
                                                            {"kohaku-moe-2b", 1953e6, 411e6}};
  for (const auto& [name, total, active] : sparse) {
    const ModelConfig c = load_model_config(std::string(AMBER_SOURCE_DIR) + "/configs/presets/" + name + ".toml");
    const double count = static_cast<double>(count_parameters(c)), used = static_cast<double>(count_active_parameters(c));
    std::cout << name << ": " << count / 1e6 << "M parameters, " << used / 1e6 << "M active\n";
    EXPECT_NEAR(count / total, 1.0, 0.005) << name;
    EXPECT_NEAR(used / active, 1.0, 0.005) << name;
  }
  const ModelConfig t = load_model_config(std::string(AMBER_SOURCE_DIR) + "/configs/tiny.toml");
  EXPECT_EQ(count_parameters(t), LanguageModel(t).parameter_count());
  const ModelConfig m = tiny_moe();
  EXPECT_EQ(count_parameters(m), LanguageModel(m).parameter_count()) << "with an MoE layer";
}

// bf16 compute (working copies and activations in bf16, fp32 master weights and
// gradients) tracks the f32 model within bf16 rounding.
TEST(LanguageModel, Bf16ComputeTracksFloat32) {
  ModelConfig c = tiny();
  c.attn_sink = true;
  c.init_std = 0.05;
  LanguageModel f32(c), bf16(c, DType::f32, Device::cpu(), DType::bf16);
  f32.init_weights(6);
  bf16.init_weights(6);
  EXPECT_EQ(bf16.param("layers.0.attn.q_proj.weight").work.dtype(), DType::bf16);
  EXPECT_EQ(bf16.param("layers.0.attn.q_proj.weight").grad.dtype(), DType::f32);
  const Batch b = make_batch({12, 30, 5}, c.vocab_size, 7);
  const double l32 = forward_backward_loss(f32, b, 1.0);
  const double l16 = forward_backward_loss(bf16, b, 1.0);
  std::cout << "loss f32 " << l32 << " bf16 " << l16 << "\n";
  EXPECT_NEAR(l16 / l32, 1.0, 1e-2);
  for (size_t i = 0; i < f32.params().size(); ++i) {
    const double err = testing::relative_error(bf16.params()[i]->grad, f32.params()[i]->grad);
    EXPECT_LT(err, 5e-2) << f32.params()[i]->name;
  }
}

TEST(LanguageModel, InitialisationIsDeterministicAndScaled) {
  ModelConfig c = tiny();
  c.init_std = 0.02;
  c.dim = 64;
  c.heads = 4;
  c.mlp_hidden = 512;
  c.depth = 8;
  LanguageModel a(c), b(c);
  a.init_weights(5);
  b.init_weights(5);
  for (size_t i = 0; i < a.params().size(); ++i)
    ASSERT_EQ(a.params()[i]->value.to_doubles(), b.params()[i]->value.to_doubles());
  auto rms = [](const Tensor& t) {
    double s = 0;
    for (double x : t.to_doubles()) s += x * x;
    return std::sqrt(s / static_cast<double>(t.numel()));
  };
  EXPECT_NEAR(rms(a.param("layers.0.mlp.gate_up_proj.weight").value), 0.02, 0.001);
  EXPECT_NEAR(rms(a.param("layers.0.mlp.down_proj.weight").value), 0.02 / 4.0, 0.0003);  // (2*8)^-0.5
  EXPECT_NEAR(rms(a.param("lm_head.weight").value), 0.125, 0.005);                        // 64^-0.5
  EXPECT_EQ(a.param("layers.0.attn_norm.weight").value.item(3), 1.0);
}

}  // namespace
}  // namespace amber
