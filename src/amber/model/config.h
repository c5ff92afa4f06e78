// ModelConfig: every architecture field of a dense decoder, typed, with defaults.
// Loaded from the [model] table of a TOML file (optionally extending another file),
// overridden by `--set model.key=value`, validated once; unknown keys are errors that
// suggest the nearest valid key.
#pragma once

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
  int loss_chunk_tokens = 256;
  // residual and init
  bool post_norm = false;                // extra norms on both branch outputs
  bool scale_residual_by_depth = false;  // branches scaled by depth^-0.5
  double init_std = 0.02;
  bool depth_scaled_init = true;  // output projections x (2 depth)^-0.5
  int mup_base_dim = 0;           // 0 = off
  // runtime
  std::string recompute = "none";  // none | block

  // Derived values; valid after validate().
  int resolved_kv_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int resolved_head_dim() const { return head_dim == 0 ? dim / heads : head_dim; }
  int resolved_mlp_hidden() const;
  bool mlp_is_gated() const { return mlp != "gelu"; }
  std::vector<int> layer_windows() const;  // per layer; 0 = global; the last layer is global
  double residual_scale() const;

  // Throws an Error naming the key and the fix for any inconsistent value.
  void validate() const;
};

// Reads the [model] table of `path` (following `extends = "other.toml"`, relative to
// the file), applies `overrides` ("model.key=value" or "key=value"), validates.
ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides = {});
ModelConfig model_config_from_toml_string(const std::string& text, const std::string& origin = "<string>");
void apply_model_override(ModelConfig& config, const std::string& assignment);
std::string model_config_to_toml(const ModelConfig& config);

// The closest of `candidates` to `word` by edit distance, or "" when none is close.
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace amber
