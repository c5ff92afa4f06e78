// Hugging Face layouts: which stock transformers class holds an amber model config
// (Gemma3ForCausalLM with norms after the branches and scaled embeddings, else
// Qwen3ForCausalLM when it has QK-norm, LlamaForCausalLM when not), the config.json
// that describes it, and the one name map between amber's whole-model parameter names
// and the class's, used by export and import alike. What no stock class computes is
// refused with a message naming the model option, never exported to a model that
// computes something else.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amber/model/config.h"

namespace amber {

enum class HfArchitecture { llama, qwen3, qwen3_moe, glm4_moe, gemma3 };

// Throws an Error naming the first option no stock class holds.
HfArchitecture hf_architecture(const ModelConfig& c);
const char* hf_model_type(HfArchitecture arch);  // "llama", "qwen3", "gemma3_text"

// The special tokens a run trains with, by id (nullopt where the run has none).
struct HfSpecialTokens {
  std::optional<int32_t> bos, eos;
};

// config.json: shape, activation, norms, RoPE (scaling included), biases, tying.
// `dtype` is the stored weights' torch name ("float32", "bfloat16").
nlohmann::ordered_json hf_config_json(const ModelConfig& c, const HfSpecialTokens& tokens, const std::string& dtype);

// One stored tensor of the Hugging Face layout and where its values come from: rows
// [row_begin, row_end) of amber's parameter `amber_name`, times `scale` (the depth
// residual scale folded into what writes the residual stream), plus `offset` (Gemma3
// stores a norm's gain minus one). An empty amber_name stands for a gain amber does not
// train (QK-norm without gains): `length` copies of `offset`.
struct HfTensorSource {
  std::string hf_name;
  std::string amber_name;
  int64_t row_begin = 0, row_end = 0;  // both 0: every row
  double scale = 1.0;
  double offset = 0.0;
  int64_t length = 0;
  int64_t expert = -1;  // >= 0: rows of that expert of a stacked [experts, rows, ...] tensor
  bool buffer = false;  // amber_name names model state that is not trained (LanguageModel::buffers)
};

// Every tensor of the stock class's checkpoint for `c` (hf_architecture(c) must
// accept it), in layer order.
std::vector<HfTensorSource> hf_tensor_map(const ModelConfig& c);

}  // namespace amber
