// A Hugging Face model folder: what AutoModelForCausalLM.from_pretrained and
// AutoTokenizer.from_pretrained load with no remote code (weights, sharded with an
// index above a size; config.json; generation_config.json; tokenizer.json and
// tokenizer_config.json), written whole under a temporary name and renamed; and the
// reading of one (sharded or not) for import, its config.json checked against the
// run's model config.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "amber/core/tensor.h"
#include "amber/export/hf_layout.h"
#include "amber/model/language_model.h"

namespace amber {

// The run's tokenizer file and the texts and ids of its special tokens ("" where the
// run has none).
struct HfTokenizerFiles {
  std::string tokenizer_json;
  std::string bos, eos;
  HfSpecialTokens ids;
};

struct HfExportOptions {
  DType dtype = DType::f32;
  int64_t shard_bytes = int64_t{5} << 30;  // larger weights go to several files and an index
};

// Writes the folder `out_dir`, which must not exist or be empty.
void write_hf_folder(const LanguageModel& model, const HfTokenizerFiles& tokenizer, const std::string& out_dir,
                     const HfExportOptions& options);

// Every tensor of the folder's model.safetensors, or of the shards its
// model.safetensors.index.json names.
std::map<std::string, Tensor> read_hf_tensors(const std::string& dir);

// Checks <dir>/config.json describes the model `c` describes (architecture, shape,
// activation, norm epsilon, RoPE, biases, tying); an Error names the first field that
// differs, both values and the model option to set.
void check_hf_config(const std::string& dir, const ModelConfig& c);

}  // namespace amber
