// GGUF export: a model llama.cpp runs with its `llama` or `qwen3` architecture (the
// Hugging Face class hf_layout.h picks, under llama.cpp's names) and the run's byte-level
// BPE tokenizer with a pre-tokenizer llama.cpp knows by name. The weights are
// hf_tensors' (so the same folding and splitting), renamed, with Llama's q and k rows
// reordered for llama.cpp's interleaved RoPE. What llama.cpp's two architectures do not
// compute is refused naming the option.
#pragma once

#include <string>
#include <vector>

#include "amber/export/hf_folder.h"
#include "amber/io/gguf.h"

namespace amber {

// The GGUF architecture ("llama" or "qwen3"); throws naming what GGUF export refuses.
std::string gguf_architecture(const ModelConfig& c);

// The tokenizer's metadata (tokenizer.ggml.*): the model's vocabulary (ids the
// tokenizer lacks as unused [PADn] tokens), token types, merges, pre-tokenizer and
// special tokens. Throws naming the tokenizer.json key llama.cpp cannot take.
std::vector<GgufEntry> gguf_tokenizer_metadata(const HfTokenizerFiles& tokenizer, int vocab_size);

// Writes `path` (f32, f16 or bf16 weights).
void write_gguf(const LanguageModel& model, const HfTokenizerFiles& tokenizer, const std::string& path, DType dtype);

}  // namespace amber
