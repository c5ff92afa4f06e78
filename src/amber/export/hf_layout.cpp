#include "amber/export/hf_layout.h"

#include <cmath>

#include "amber/core/error.h"

namespace amber {
namespace {

// What no stock Llama or Qwen3 class computes; the message names the option and why.
void refuse_unheld(const ModelConfig& c) {
  const auto refuse = [](bool unheld, const std::string& what) {
    AMBER_CHECK(!unheld, what, "; Hugging Face export covers what stock LlamaForCausalLM and Qwen3ForCausalLM compute "
                               "(docs/interop.md)");
  };
  refuse(c.moe_experts > 0, "model.moe_experts > 0: Mixture-of-Experts models have no Hugging Face export yet");
  refuse(c.norm != "rmsnorm", concat("model.norm = '", c.norm, "': Llama and Qwen3 normalise with RMSNorm"));
  refuse(c.mlp != "swiglu" && c.mlp != "geglu",
         concat("model.mlp = '", c.mlp, "': Llama and Qwen3 MLPs are gated (swiglu or geglu)"));
  refuse(c.posenc != "rope", concat("model.posenc = '", c.posenc, "': Llama and Qwen3 encode positions with RoPE"));
  refuse(c.rope_partial != 1.0,
         concat("model.rope_partial = ", c.rope_partial, ": Llama and Qwen3 rotate every channel of a head"));
  refuse(c.attn_sink, "model.attn_sink = true: no stock class has attention sinks");
  refuse(c.post_norm, "model.post_norm = true: Llama and Qwen3 have no norms after the branches");
  refuse(c.embedding_scale, "model.embedding_scale = true: Llama and Qwen3 do not scale the embeddings");
  bool windowed = false;
  for (int w : c.layer_windows()) windowed = windowed || w > 0;
  refuse(windowed, "model.sliding_window or model.window_pattern: exported models attend globally in every layer");
  refuse(c.qk_norm && c.attn_bias,
         "model.qk_norm with model.attn_bias: Qwen3 (QK-norm) has no MLP biases, which amber's attn_bias adds");
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

}  // namespace

HfArchitecture hf_architecture(const ModelConfig& c) {
  refuse_unheld(c);
  return c.qk_norm ? HfArchitecture::qwen3 : HfArchitecture::llama;
}

const char* hf_model_type(HfArchitecture arch) { return arch == HfArchitecture::qwen3 ? "qwen3" : "llama"; }

nlohmann::ordered_json hf_config_json(const ModelConfig& c, const HfSpecialTokens& tokens, const std::string& dtype) {
  const HfArchitecture arch = hf_architecture(c);
  nlohmann::ordered_json j;
  j["architectures"] = {arch == HfArchitecture::qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
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
  if (arch == HfArchitecture::qwen3) j["use_sliding_window"] = false;
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
  std::vector<HfTensorSource> map;
  const auto add = [&](std::string hf, std::string amber, double scale = 1.0) {
    map.push_back({std::move(hf), std::move(amber), 0, 0, scale, 0});
  };
  // The residual stream adds rs * (W h + b): rs folds into W and b of the branch's
  // output projection.
  const double rs = c.residual_scale();
  const int64_t hidden = c.resolved_mlp_hidden();
  add("model.embed_tokens.weight", "embed_tokens.weight");
  for (int i = 0; i < c.depth; ++i) {
    const std::string a = concat("layers.", i, "."), h = concat("model.layers.", i, ".");
    add(h + "input_layernorm.weight", a + "attn_norm.weight");
    std::vector<const char*> parts = {"weight"};
    if (c.attn_bias) parts.push_back("bias");
    for (const char* part : parts) {
      for (const char* proj : {"q_proj.", "k_proj.", "v_proj."})
        add(h + "self_attn." + proj + part, a + "attn." + proj + part);
      add(h + "self_attn.o_proj." + part, a + "attn.o_proj." + part, rs);
    }
    if (c.qk_norm) {
      for (const char* norm : {"q_norm", "k_norm"}) {
        if (c.qk_norm_affine)
          add(h + "self_attn." + norm + ".weight", a + "attn." + norm + ".weight");
        else
          map.push_back({h + "self_attn." + norm + ".weight", "", 0, 0, 1.0, c.resolved_head_dim()});
      }
    }
    add(h + "post_attention_layernorm.weight", a + "mlp_norm.weight");
    for (const char* part : parts) {
      // gate_up_proj holds the gate's rows, then the value's (ops/activation.h).
      map.push_back({h + "mlp.gate_proj." + part, a + "mlp.gate_up_proj." + part, 0, hidden, 1.0, 0});
      map.push_back({h + "mlp.up_proj." + part, a + "mlp.gate_up_proj." + part, hidden, 2 * hidden, 1.0, 0});
      add(h + "mlp.down_proj." + part, a + "mlp.down_proj." + part, rs);
    }
  }
  add("model.norm.weight", "norm.weight");
  if (!c.tie_embeddings) add("lm_head.weight", "lm_head.weight");
  return map;
}

}  // namespace amber
