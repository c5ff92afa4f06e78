// Model config: derived values and validation; parsing goes through the shared
// TOML binder (core/toml_fields.h) over ModelConfig::fields.
#include "amber/model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "amber/core/error.h"
#include "amber/core/toml_fields.h"
#include "amber/model/linear.h"

namespace amber {

int ModelConfig::resolved_mlp_hidden() const {
  if (mlp_hidden > 0) return mlp_hidden;
  double hidden = dim * mlp_ratio;
  if (mlp_is_gated()) hidden = hidden * 2.0 / 3.0;
  const int m = std::max(mlp_multiple_of, 1);
  return static_cast<int>(std::ceil(hidden / m)) * m;
}

std::vector<int> ModelConfig::layer_windows() const {
  std::vector<int> windows(static_cast<size_t>(depth), 0);
  for (int i = 0; i < depth; ++i) {
    if (!window_pattern.empty()) {
      windows[i] = window_pattern[i % window_pattern.size()];
    } else if (sliding_window > 0) {
      const bool global = global_layer_every > 0 && (i + 1) % global_layer_every == 0;
      windows[i] = global ? 0 : sliding_window;
    }
  }
  if (depth > 0) windows.back() = 0;  // the last layer always sees the whole document
  return windows;
}

double ModelConfig::projection_init_std(int64_t fan_in, bool writes_residual) const {
  double std = init_std * (mup_base_dim > 0 ? std::sqrt(mup_base_dim / static_cast<double>(fan_in)) : 1.0);
  if (writes_residual && depth_scaled_init) std *= 1.0 / std::sqrt(2.0 * depth);
  return std;
}

double ModelConfig::residual_scale() const {
  return scale_residual_by_depth ? 1.0 / std::sqrt(static_cast<double>(depth)) : 1.0;
}

void ModelConfig::validate() const {
  auto positive = [](const char* key, double v) {
    AMBER_CHECK(v > 0, "model.", key, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("depth", depth);
  positive("heads", heads);
  positive("max_position", max_position);
  positive("norm_eps", norm_eps);
  positive("init_std", init_std);
  positive("loss_chunk_tokens", loss_chunk_tokens);
  AMBER_CHECK(kv_heads >= 0 && head_dim >= 0 && mlp_hidden >= 0 && mup_base_dim >= 0,
              "model.kv_heads, head_dim, mlp_hidden and mup_base_dim must be >= 0 (0 = derived)");
  AMBER_CHECK(head_dim > 0 || dim % heads == 0, "model.heads = ", heads, " does not divide model.dim = ",
              dim, "; choose heads dividing dim or set model.head_dim explicitly");
  AMBER_CHECK(heads % resolved_kv_heads() == 0, "model.kv_heads = ", kv_heads,
              " does not divide model.heads = ", heads, " (grouped-query attention needs heads % kv_heads == 0)");
  AMBER_CHECK(mlp_hidden > 0 || (mlp_ratio > 0 && mlp_multiple_of > 0),
              "model.mlp_ratio and model.mlp_multiple_of must be positive when model.mlp_hidden is 0");
  AMBER_CHECK(sliding_window >= 0 && global_layer_every >= 0,
              "model.sliding_window and model.global_layer_every must be >= 0");
  for (int w : window_pattern)
    AMBER_CHECK(w >= 0, "model.window_pattern entries must be >= 0 (0 = global), got ", w);
  for (const auto& [key, recipe] : {std::pair<const char*, const std::string&>{"attention_recipe", attention_recipe},
                                     std::pair<const char*, const std::string&>{"mlp_recipe", mlp_recipe}}) {
    if (!linear_recipe_registry().contains(recipe)) {
      std::string valid;
      for (const std::string& name : linear_recipe_registry().names()) valid += (valid.empty() ? "" : ", ") + name;
      fail("model.", key, " = '", recipe, "' is not a linear recipe; valid: ", valid);
    }
    AMBER_CHECK(recipe == kComputeDtypeRecipe || !attn_bias, "model.", key, " = '", recipe,
                "' has no projection bias yet; set model.attn_bias = false or keep the compute_dtype recipe");
  }
  AMBER_CHECK(expert_recipe == kComputeDtypeRecipe || expert_recipe == kFp8BlockHpWgradRecipe,
              "model.expert_recipe = '", expert_recipe, "' is not one of: ", kComputeDtypeRecipe, ", ",
              kFp8BlockHpWgradRecipe,
              expert_recipe == kFp8BlockRecipe
                  ? " (the routed experts' weight gradients have no FP8 product yet: fp8_block_hp_wgrad runs "
                    "their forward and input-gradient products in FP8)"
                  : "");
  AMBER_CHECK(recompute == "none" || recompute == "block", "model.recompute = '", recompute,
              "' is not one of: none, block");
  AMBER_CHECK(rope_partial > 0 && rope_partial <= 1, "model.rope_partial must be in (0, 1], got ", rope_partial);
  AMBER_CHECK(z_loss_weight >= 0, "model.z_loss_weight must be >= 0, got ", z_loss_weight);
  AMBER_CHECK(moe_experts >= 0, "model.moe_experts must be >= 0 (0 = dense), got ", moe_experts);
  AMBER_CHECK(mlp != "moe", "model.mlp = 'moe': sparse layers come from model.moe_experts (with moe_top_k, "
                            "moe_hidden, moe_first_dense, moe_every); model.mlp names the dense layers' MLP");
  if (moe_experts > 0) {
    AMBER_CHECK(moe_top_k >= 1 && moe_top_k <= moe_experts, "model.moe_top_k = ", moe_top_k,
                " must be between 1 and model.moe_experts = ", moe_experts);
    AMBER_CHECK(moe_hidden > 0, "model.moe_hidden (each expert's width) must be set with model.moe_experts, e.g. "
                                "model.moe_hidden = 384");
    AMBER_CHECK(moe_shared_experts >= 0, "model.moe_shared_experts must be >= 0, got ", moe_shared_experts);
    AMBER_CHECK(moe_first_dense >= 0 && moe_first_dense < depth, "model.moe_first_dense = ", moe_first_dense,
                " must leave at least one of the ", depth, " layers sparse");
    AMBER_CHECK(moe_every >= 1, "model.moe_every must be >= 1, got ", moe_every);
    AMBER_CHECK(moe_router == "softmax" || moe_router == "sigmoid" || moe_router == "sqrt_softplus",
                "model.moe_router = '", moe_router, "' is not one of: softmax, sigmoid, sqrt_softplus");
    AMBER_CHECK(moe_routed_scaling > 0, "model.moe_routed_scaling must be positive, got ", moe_routed_scaling);
    AMBER_CHECK(moe_bias_update_rate >= 0, "model.moe_bias_update_rate must be >= 0 (0 = no balance bias), got ",
                moe_bias_update_rate);
    AMBER_CHECK(moe_balance_loss_weight >= 0, "model.moe_balance_loss_weight must be >= 0 (0 = no balance loss), got ",
                moe_balance_loss_weight);
    AMBER_CHECK(moe_z_loss_weight >= 0, "model.moe_z_loss_weight must be >= 0 (0 = no router z-loss), got ",
                moe_z_loss_weight);
    AMBER_CHECK(mlp == "swiglu", "model.mlp = '", mlp, "': MoE experts are SwiGLU, so the dense layers must be too");
  }
}

bool ModelConfig::layer_is_sparse(int layer) const {
  return moe_experts > 0 && layer >= moe_first_dense && (layer - moe_first_dense) % moe_every == 0;
}

namespace {

ModelConfig bind_model(const toml::table& root, const std::string& where) {
  ModelConfig c;
  bind_section(root, "model", where, [&](auto&& fn) { c.fields(fn); });
  c.validate();
  return c;
}

}  // namespace

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  return bind_model(read_config_file(path, overrides), path);
}

ModelConfig model_config_from_toml_string(const std::string& text, const std::string& origin) {
  return bind_model(parse_toml_text(text, origin), origin);
}

std::string model_config_to_toml(const ModelConfig& config) {
  ModelConfig c = config;
  toml::table root;
  root.insert("model", dump_section([&](auto&& fn) { c.fields(fn); }));
  return toml_to_string(root);
}

}  // namespace amber
