// ModelConfig: every architecture field of a decoder (dense, or with Mixture-of-Experts
// layers), typed, with defaults.
// Loaded from the [model] table of a TOML file (optionally extending another file),
// overridden by `--set model.key=value`, validated once; unknown keys are errors that
// suggest the nearest valid key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace amber {

struct ModelConfig {
  // shape
  int vocab_size = 65536;
  int dim = 1024;
  int depth = 24;
  int heads = 16;
  int kv_heads = 4;   // 0 = heads (multi-head attention)
  int head_dim = 0;   // 0 = dim / heads
  double mlp_ratio = 4.0;
  int mlp_hidden = 0;  // 0 = from mlp_ratio, rounded up to mlp_multiple_of
  int mlp_multiple_of = 128;
  int max_position = 8192;
  // components (registry names)
  std::string norm = "rmsnorm";
  std::string mlp = "swiglu";
  std::string attention = "causal";
  std::string posenc = "rope";
  double norm_eps = 1e-6;
  // attention
  bool qk_norm = true;
  bool qk_norm_affine = true;
  bool attn_bias = false;
  bool attn_sink = false;
  int sliding_window = 0;      // 0 = none
  int global_layer_every = 0;  // with a window: every n-th layer (1-based) is global
  std::vector<int> window_pattern;  // explicit per-layer windows, cycled; 0 = global
  double rope_theta = 10000.0;
  std::string rope_scaling = "none";  // none | linear | ntk | yarn
  double rope_factor = 1.0;
  double rope_partial = 1.0;
  // embedding and head
  bool tie_embeddings = false;
  bool embedding_scale = false;  // multiply embeddings by sqrt(dim)
  double z_loss_weight = 0.0;
  int loss_chunk_tokens = 2048;
  // residual and init
  bool post_norm = false;                // extra norms on both branch outputs
  bool scale_residual_by_depth = false;  // branches scaled by depth^-0.5
  double init_std = 0.02;
  bool depth_scaled_init = true;  // output projections x (2 depth)^-0.5
  int mup_base_dim = 0;           // 0 = off
  // mixture of experts (DeepSeekMoE layout): moe_experts 0 keeps every layer dense
  int moe_experts = 0;
  int moe_top_k = 8;
  int moe_hidden = 0;          // each expert's SwiGLU width (required with experts)
  int moe_shared_experts = 0;  // always-active experts, moe_hidden wide each
  int moe_first_dense = 0;     // leading layers kept dense
  int moe_every = 1;           // past those, every n-th layer is sparse
  std::string moe_router = "softmax";  // softmax | sigmoid | sqrt_softplus
  bool moe_normalize = true;           // the chosen scores divided by their sum
  double moe_routed_scaling = 1.0;
  double moe_bias_update_rate = 0.0;  // the auxiliary-loss-free balance bias's step; 0 = none
  double moe_balance_loss_weight = 0.0;  // the sequence-wise balance loss's weight; 0 = none
  double moe_z_loss_weight = 0.0;        // the router z-loss's weight; 0 = none
  // how the projections' products run (linear recipes, model/linear.h): compute_dtype,
  // fp8_block or fp8_block_hp_wgrad; the LM head keeps the compute dtype
  std::string attention_recipe = "compute_dtype";  // q, k, v and o projections
  std::string mlp_recipe = "compute_dtype";        // dense MLPs and MoE shared experts
  // MoE routed experts' grouped products: compute_dtype or fp8_block_hp_wgrad (no
  // k-grouped FP8 product for their weight gradients yet)
  std::string expert_recipe = "compute_dtype";
  // runtime
  std::string recompute = "none";  // none | block

  // Derived values; valid after validate().
  int resolved_kv_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int resolved_head_dim() const { return head_dim == 0 ? dim / heads : head_dim; }
  int resolved_mlp_hidden() const;
  bool mlp_is_gated() const { return mlp != "gelu"; }
  std::vector<int> layer_windows() const;  // per layer; 0 = global; the last layer is global
  bool layer_is_sparse(int layer) const;   // an MoE layer (0-based index)
  double residual_scale() const;
  // A projection weight's init std: init_std (times sqrt(mup_base_dim / fan_in) under
  // muP), and for the projections whose output the residual stream adds (o_proj,
  // down_proj) times (2 depth)^-0.5 under depth_scaled_init.
  double projection_init_std(int64_t fan_in, bool writes_residual) const;

  // Throws an Error naming the key and the fix for any inconsistent value.
  void validate() const;

  // Calls fn(name, field) for every field: the one list that parsing, overrides and
  // dumping share.
  template <class Fn>
  void fields(Fn&& v) {
    v("vocab_size", vocab_size);
    v("dim", dim);
    v("depth", depth);
    v("heads", heads);
    v("kv_heads", kv_heads);
    v("head_dim", head_dim);
    v("mlp_ratio", mlp_ratio);
    v("mlp_hidden", mlp_hidden);
    v("mlp_multiple_of", mlp_multiple_of);
    v("max_position", max_position);
    v("norm", norm);
    v("mlp", mlp);
    v("attention", attention);
    v("posenc", posenc);
    v("norm_eps", norm_eps);
    v("qk_norm", qk_norm);
    v("qk_norm_affine", qk_norm_affine);
    v("attn_bias", attn_bias);
    v("attn_sink", attn_sink);
    v("sliding_window", sliding_window);
    v("global_layer_every", global_layer_every);
    v("window_pattern", window_pattern);
    v("rope_theta", rope_theta);
    v("rope_scaling", rope_scaling);
    v("rope_factor", rope_factor);
    v("rope_partial", rope_partial);
    v("tie_embeddings", tie_embeddings);
    v("embedding_scale", embedding_scale);
    v("z_loss_weight", z_loss_weight);
    v("loss_chunk_tokens", loss_chunk_tokens);
    v("post_norm", post_norm);
    v("scale_residual_by_depth", scale_residual_by_depth);
    v("init_std", init_std);
    v("depth_scaled_init", depth_scaled_init);
    v("mup_base_dim", mup_base_dim);
    v("moe_experts", moe_experts);
    v("moe_top_k", moe_top_k);
    v("moe_hidden", moe_hidden);
    v("moe_shared_experts", moe_shared_experts);
    v("moe_first_dense", moe_first_dense);
    v("moe_every", moe_every);
    v("moe_router", moe_router);
    v("moe_normalize", moe_normalize);
    v("moe_routed_scaling", moe_routed_scaling);
    v("moe_bias_update_rate", moe_bias_update_rate);
    v("moe_balance_loss_weight", moe_balance_loss_weight);
    v("moe_z_loss_weight", moe_z_loss_weight);
    v("attention_recipe", attention_recipe);
    v("mlp_recipe", mlp_recipe);
    v("expert_recipe", expert_recipe);
    v("recompute", recompute);
  }
};

// Reads the [model] table of `path` (following `extends`), applies `overrides`
// ("model.key=value"; other sections are ignored here), validates.
ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides = {});
ModelConfig model_config_from_toml_string(const std::string& text, const std::string& origin = "<string>");
std::string model_config_to_toml(const ModelConfig& config);

}  // namespace amber
