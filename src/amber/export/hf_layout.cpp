#include "amber/export/hf_layout.h"

#include <cmath>
#include <functional>
#include <set>

#include "amber/core/error.h"

namespace amber {
namespace {

// Gemma3's marks: norms after both branches and embeddings scaled by sqrt(dim).
bool gemma_style(const ModelConfig& c) { return c.post_norm || c.embedding_scale; }

// The one window width a model's windowed layers share; 0 when every layer is global.
// Several widths are refused: Gemma3 has one sliding_window.
int shared_window(const ModelConfig& c, const std::function<void(bool, const std::string&)>& refuse) {
  std::set<int> widths;
  for (int w : c.layer_windows())
    if (w > 0) widths.insert(w);
  refuse(widths.size() > 1, "model.window_pattern with several window widths: Gemma3 has one sliding_window");
  return widths.empty() ? 0 : *widths.begin();
}

// What no stock Llama, Qwen3 or Gemma3 class computes; the message names the option
// and why.
void refuse_unheld(const ModelConfig& c) {
  const auto refuse = [](bool unheld, const std::string& what) {
    AMBER_CHECK(!unheld, what, "; Hugging Face export covers what stock LlamaForCausalLM, Qwen3ForCausalLM, "
                               "Qwen3MoeForCausalLM, Glm4MoeForCausalLM and Gemma3ForCausalLM compute "
                               "(docs/interop.md)");
  };
  if (c.moe_experts > 0) {
    // Softmax routers export as Qwen3-MoE, sigmoid ones (DeepSeek-V3's, with shared
    // experts and the balance bias) as GLM-4.5's Glm4Moe: both attend as Qwen3 does.
    const bool softmax = c.moe_router == "softmax";
    const std::string moe = softmax ? "a softmax-routed Mixture-of-Experts model exports as Qwen3-MoE, "
                                    : "a sigmoid-routed Mixture-of-Experts model exports as Glm4Moe, ";
    refuse(c.moe_router != "softmax" && c.moe_router != "sigmoid",
           concat("model.moe_router = '", c.moe_router, "': the stock MoE classes route by softmax (Qwen3-MoE) or "
                  "sigmoid (Glm4Moe)"));
    refuse(c.post_norm || c.embedding_scale, "model.moe_experts > 0 with Gemma3-style norms: " + moe +
           "with norms before the branches");
    refuse(softmax && !c.qk_norm, "model.moe_experts > 0 without model.qk_norm: " + moe + "which has QK-norm");
    refuse(c.attn_bias, "model.attn_bias with model.moe_experts > 0: " + moe + "whose experts have no biases");
    refuse(c.mlp != "swiglu", concat("model.mlp = '", c.mlp, "' with experts: ", moe, "whose MLPs are SwiGLU"));
    refuse(softmax && c.moe_shared_experts > 0, "model.moe_shared_experts > 0 with model.moe_router = 'softmax': " +
           moe + "which has no shared experts (sigmoid routing exports them, as Glm4Moe)");
    refuse(softmax && c.moe_routed_scaling != 1.0, concat("model.moe_routed_scaling = ", c.moe_routed_scaling,
                                                          " with model.moe_router = 'softmax': ", moe,
                                                          "which does not scale the routed experts"));
    refuse(softmax && c.moe_bias_update_rate > 0, "model.moe_bias_update_rate > 0 with model.moe_router = 'softmax': " +
           moe + "whose router has no balance bias");
    refuse(!softmax && c.moe_every != 1, concat("model.moe_every = ", c.moe_every, ": ", moe,
                                                "whose layers past the leading dense ones are all sparse"));
  }
  refuse(c.norm != "rmsnorm", concat("model.norm = '", c.norm, "': Llama, Qwen3 and Gemma3 normalise with RMSNorm"));
  refuse(c.mlp != "swiglu" && c.mlp != "geglu",
         concat("model.mlp = '", c.mlp, "': Llama, Qwen3 and Gemma3 MLPs are gated (swiglu or geglu)"));
  refuse(c.posenc != "rope", concat("model.posenc = '", c.posenc, "': the stock classes encode positions with RoPE"));
  refuse(c.rope_partial != 1.0,
         concat("model.rope_partial = ", c.rope_partial, ": the stock classes rotate every channel of a head"));
  refuse(c.attn_sink, "model.attn_sink = true: no stock class of these has attention sinks");
  refuse(c.qk_norm && c.attn_bias,
         "model.qk_norm with model.attn_bias: Qwen3 and Gemma3 have no MLP biases, which amber's attn_bias adds");
  const int window = shared_window(c, refuse);
  if (!gemma_style(c)) {
    refuse(window > 0, "model.sliding_window or model.window_pattern without model.post_norm and "
                       "model.embedding_scale: Llama and Qwen3 attend globally in every layer (Gemma3 has windows)");
    return;
  }
  refuse(!c.post_norm, "model.embedding_scale without model.post_norm: Gemma3 has both, Llama and Qwen3 neither");
  refuse(!c.embedding_scale, "model.post_norm without model.embedding_scale: Gemma3 has both, Llama and Qwen3 neither");
  refuse(!c.qk_norm, "model.post_norm and model.embedding_scale without model.qk_norm: Gemma3 has QK-norm");
  refuse(window > 0 && c.rope_scaling != "none",
         concat("model.rope_scaling = '", c.rope_scaling,
                "' with sliding windows: Gemma3 scales RoPE in its global layers only"));
}

nlohmann::ordered_json rope_scaling_json(const ModelConfig& c) {
  if (c.rope_scaling == "linear") return {{"rope_type", "linear"}, {"factor", c.rope_factor}};
  // YaRN's pre-extension context is amber's max_position, which transformers takes as
  // the original context when the entry names none.
  if (c.rope_scaling == "yarn")
    return {{"rope_type", "yarn"}, {"factor", c.rope_factor}, {"beta_fast", 32.0}, {"beta_slow", 1.0}};
  return nullptr;  // none, and NTK, whose stretched base is rope_theta itself
}

// NTK-aware scaling is a larger base: theta * factor^(d / (d - 2)) over the rotary width.
double effective_rope_theta(const ModelConfig& c) {
  if (c.rope_scaling != "ntk") return c.rope_theta;
  const double d = c.resolved_head_dim();
  return c.rope_theta * std::pow(c.rope_factor, d / (d - 2.0));
}

const char* class_name(HfArchitecture arch) {
  switch (arch) {
    case HfArchitecture::qwen3: return "Qwen3ForCausalLM";
    case HfArchitecture::qwen3_moe: return "Qwen3MoeForCausalLM";
    case HfArchitecture::glm4_moe: return "Glm4MoeForCausalLM";
    case HfArchitecture::gemma3: return "Gemma3ForCausalLM";
    default: return "LlamaForCausalLM";
  }
}

// Gemma3's fields past the shared ones: its own activation key, the attention scale
// 1/sqrt(query_pre_attn_scalar), one RoPE base for both layer kinds, and each layer's
// kind (amber's last layer is always global).
void add_gemma3_fields(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_activation"] = j["hidden_act"];
  j["query_pre_attn_scalar"] = c.resolved_head_dim();
  j["rope_local_base_freq"] = j["rope_theta"];
  int window = 0;
  nlohmann::ordered_json kinds = nlohmann::ordered_json::array();
  for (int w : c.layer_windows()) {
    kinds.push_back(w > 0 ? "sliding_attention" : "full_attention");
    window = std::max(window, w);
  }
  j["sliding_window"] = window > 0 ? window : c.max_position;
  j["layer_types"] = kinds;
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
}

// Qwen3-MoE's fields: the experts, their width, top-k and its renormalisation, and the
// dense layers (amber's leading dense layers and those between every n-th sparse one).
void add_qwen3_moe_fields(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["num_experts"] = c.moe_experts;
  j["num_experts_per_tok"] = c.moe_top_k;
  j["moe_intermediate_size"] = c.moe_hidden;
  j["norm_topk_prob"] = c.moe_normalize;
  j["decoder_sparse_step"] = 1;
  nlohmann::ordered_json dense = nlohmann::ordered_json::array();
  for (int i = 0; i < c.depth; ++i)
    if (!c.layer_is_sparse(i)) dense.push_back(i);
  j["mlp_only_layers"] = dense;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = c.moe_balance_loss_weight;
}

// Glm4Moe's fields: routed and shared experts, top-k renormalised and scaled, one
// group (no group-limited choice), the leading dense layers, QK-norm when the model has
// it, and every channel rotated (the class's default rotates half).
void add_glm4_moe_fields(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["n_routed_experts"] = c.moe_experts;
  j["n_shared_experts"] = c.moe_shared_experts;
  j["num_experts_per_tok"] = c.moe_top_k;
  j["moe_intermediate_size"] = c.moe_hidden;
  j["norm_topk_prob"] = c.moe_normalize;
  j["routed_scaling_factor"] = c.moe_routed_scaling;
  j["n_group"] = 1;
  j["topk_group"] = 1;
  j["first_k_dense_replace"] = c.moe_first_dense;
  j["use_qk_norm"] = c.qk_norm;
  j["partial_rotary_factor"] = 1.0;
  j["num_nextn_predict_layers"] = 0;
}

}  // namespace

HfArchitecture hf_architecture(const ModelConfig& c) {
  refuse_unheld(c);
  if (c.moe_experts > 0) return c.moe_router == "softmax" ? HfArchitecture::qwen3_moe : HfArchitecture::glm4_moe;
  if (gemma_style(c)) return HfArchitecture::gemma3;
  return c.qk_norm ? HfArchitecture::qwen3 : HfArchitecture::llama;
}

const char* hf_model_type(HfArchitecture arch) {
  switch (arch) {
    case HfArchitecture::qwen3: return "qwen3";
    case HfArchitecture::qwen3_moe: return "qwen3_moe";
    case HfArchitecture::glm4_moe: return "glm4_moe";
    case HfArchitecture::gemma3: return "gemma3_text";
    default: return "llama";
  }
}

nlohmann::ordered_json hf_config_json(const ModelConfig& c, const HfSpecialTokens& tokens, const std::string& dtype) {
  const HfArchitecture arch = hf_architecture(c);
  nlohmann::ordered_json j;
  j["architectures"] = {class_name(arch)};
  j["model_type"] = hf_model_type(arch);
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.resolved_mlp_hidden();
  j["num_hidden_layers"] = c.depth;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.resolved_kv_heads();
  j["head_dim"] = c.resolved_head_dim();
  // amber's GeGLU is the tanh approximation of GELU.
  j["hidden_act"] = c.mlp == "geglu" ? "gelu_pytorch_tanh" : "silu";
  j["max_position_embeddings"] = c.max_position;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = effective_rope_theta(c);
  j["rope_scaling"] = rope_scaling_json(c);
  j["attention_bias"] = c.attn_bias;
  if (arch == HfArchitecture::llama) j["mlp_bias"] = c.attn_bias;
  if (arch == HfArchitecture::qwen3 || arch == HfArchitecture::qwen3_moe) j["use_sliding_window"] = false;
  if (arch == HfArchitecture::qwen3_moe) add_qwen3_moe_fields(c, j);
  if (arch == HfArchitecture::glm4_moe) add_glm4_moe_fields(c, j);
  if (arch == HfArchitecture::gemma3) add_gemma3_fields(c, j);
  j["attention_dropout"] = 0.0;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["initializer_range"] = c.init_std;
  j["bos_token_id"] = tokens.bos ? nlohmann::ordered_json(*tokens.bos) : nullptr;
  j["eos_token_id"] = tokens.eos ? nlohmann::ordered_json(*tokens.eos) : nullptr;
  j["torch_dtype"] = dtype;
  j["use_cache"] = true;
  return j;
}

std::vector<HfTensorSource> hf_tensor_map(const ModelConfig& c) {
  const HfArchitecture arch = hf_architecture(c);
  // Gemma3's RMSNorm multiplies by (1 + weight): its gains are amber's minus one.
  const double gain_offset = arch == HfArchitecture::gemma3 ? -1.0 : 0.0;
  std::vector<HfTensorSource> map;
  const auto add = [&](std::string hf, std::string amber, double scale = 1.0, double offset = 0.0) {
    map.push_back({std::move(hf), std::move(amber), 0, 0, scale, offset, 0});
  };
  const auto gain = [&](std::string hf, std::string amber, double scale = 1.0) {
    add(std::move(hf), std::move(amber), scale, gain_offset);
  };
  // The residual stream adds rs * branch: rs folds into the branch's last factor, the
  // output projection's W and b, or with norms after the branches that norm's gain.
  const double rs = c.residual_scale();
  const double projection_rs = c.post_norm ? 1.0 : rs;
  const int64_t hidden = c.resolved_mlp_hidden();
  add("model.embed_tokens.weight", "embed_tokens.weight");
  for (int i = 0; i < c.depth; ++i) {
    const std::string a = concat("layers.", i, "."), h = concat("model.layers.", i, ".");
    gain(h + "input_layernorm.weight", a + "attn_norm.weight");
    std::vector<const char*> parts = {"weight"};
    if (c.attn_bias) parts.push_back("bias");
    for (const char* part : parts) {
      for (const char* proj : {"q_proj.", "k_proj.", "v_proj."})
        add(h + "self_attn." + proj + part, a + "attn." + proj + part);
      add(h + "self_attn.o_proj." + part, a + "attn.o_proj." + part, projection_rs);
    }
    if (c.qk_norm) {
      for (const char* norm : {"q_norm", "k_norm"}) {
        if (c.qk_norm_affine)
          gain(h + "self_attn." + norm + ".weight", a + "attn." + norm + ".weight");
        else  // gains of one, in the class's form
          map.push_back({h + "self_attn." + norm + ".weight", "", 0, 0, 1.0, 1.0 + gain_offset,
                         c.resolved_head_dim()});
      }
    }
    if (c.post_norm) {
      gain(h + "post_attention_layernorm.weight", a + "post_attn_norm.weight", rs);
      gain(h + "pre_feedforward_layernorm.weight", a + "mlp_norm.weight");
    } else {
      gain(h + "post_attention_layernorm.weight", a + "mlp_norm.weight");
    }
    if (c.layer_is_sparse(i)) {
      add(h + "mlp.gate.weight", a + "mlp.router.weight");
      if (arch == HfArchitecture::glm4_moe) {
        // The balance bias moves the choice of experts, not their weights; without one, zeros.
        if (c.moe_bias_update_rate > 0)
          map.push_back({h + "mlp.gate.e_score_correction_bias", a + "mlp.router.balance_bias", 0, 0, 1.0, 0.0, 0,
                         -1, true});
        else
          map.push_back({h + "mlp.gate.e_score_correction_bias", "", 0, 0, 1.0, 0.0, c.moe_experts});
        const int64_t shared = int64_t{c.moe_shared_experts} * c.moe_hidden;
        const std::string x = h + "mlp.shared_experts.", stacked = a + "mlp.shared_experts.";
        if (shared > 0) {
          map.push_back({x + "gate_proj.weight", stacked + "gate_up_proj.weight", 0, shared, 1.0, 0.0, 0});
          map.push_back({x + "up_proj.weight", stacked + "gate_up_proj.weight", shared, 2 * shared, 1.0, 0.0, 0});
          add(x + "down_proj.weight", stacked + "down_proj.weight", projection_rs);
        }
      }
      const int64_t width = c.moe_hidden;
      for (int64_t e = 0; e < c.moe_experts; ++e) {
        const std::string x = concat(h, "mlp.experts.", e, "."), stacked = a + "mlp.experts.";
        map.push_back({x + "gate_proj.weight", stacked + "gate_up_proj", 0, width, 1.0, 0.0, 0, e});
        map.push_back({x + "up_proj.weight", stacked + "gate_up_proj", width, 2 * width, 1.0, 0.0, 0, e});
        map.push_back({x + "down_proj.weight", stacked + "down_proj", 0, 0, projection_rs, 0.0, 0, e});
      }
    } else {
      for (const char* part : parts) {
        // gate_up_proj holds the gate's rows, then the value's (ops/activation.h).
        map.push_back({h + "mlp.gate_proj." + part, a + "mlp.gate_up_proj." + part, 0, hidden, 1.0, 0.0, 0});
        map.push_back({h + "mlp.up_proj." + part, a + "mlp.gate_up_proj." + part, hidden, 2 * hidden, 1.0, 0.0, 0});
        add(h + "mlp.down_proj." + part, a + "mlp.down_proj." + part, projection_rs);
      }
    }
    if (c.post_norm) gain(h + "post_feedforward_layernorm.weight", a + "post_mlp_norm.weight", rs);
  }
  gain("model.norm.weight", "norm.weight");
  if (!c.tie_embeddings) add("lm_head.weight", "lm_head.weight");
  return map;
}

}  // namespace amber
