#include "amber/export/gguf_export.h"

#include <cstring>
#include <fstream>
#include <map>

#include "amber/data/pretokenizer.h"
#include "amber/export/hf_weights.h"

namespace amber {
namespace {

// Hugging Face names to llama.cpp's; the part after the layer prefix, or the whole
// name outside the layers.
const std::map<std::string, std::string>& gguf_names() {
  static const std::map<std::string, std::string> names = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"input_layernorm", "attn_norm"},
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
  };
  return names;
}

std::string gguf_name(const std::string& hf) {
  if (const auto it = gguf_names().find(hf); it != gguf_names().end()) return it->second;
  // model.layers.N.<module>.<weight|bias>
  const std::string prefix = "model.layers.";
  const size_t layer_end = hf.find('.', prefix.size());
  const size_t part = hf.rfind('.');
  const std::string module = hf.substr(layer_end + 1, part - layer_end - 1);
  return "blk." + hf.substr(prefix.size(), layer_end - prefix.size()) + "." + gguf_names().at(module) +
         hf.substr(part);
}

// llama.cpp's `llama` architecture rotates interleaved pairs (2j, 2j + 1) where Hugging
// Face's Llama rotates halves (j, j + d/2): each head's rows of q and k (weight and bias)
// reordered so that row 2j + s is the old row s d/2 + j.
Tensor interleave_heads(const Tensor& t, int64_t head_dim) {
  const Tensor in = t.contiguous();
  Tensor out = Tensor::empty(in.shape(), in.dtype());
  const int64_t rows = in.size(0), row_bytes = static_cast<int64_t>(in.bytes()) / rows, half = head_dim / 2;
  const char* src = static_cast<const char*>(in.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, i = r % head_dim;
    const int64_t from = head * head_dim + (i % 2) * half + i / 2;
    std::memcpy(dst + r * row_bytes, src + from * row_bytes, static_cast<size_t>(row_bytes));
  }
  return out;
}

nlohmann::json read_tokenizer_json(const std::string& path) {
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, " is not valid JSON (", e.what(), ")");
  }
}

// llama.cpp picks its pre-tokenizer by name: amber's two styles (`amber tokenizer train
// --pretokenizer`) are llama.cpp's "llama-bpe" and "gpt-2".
std::string pre_tokenizer_name(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json();
  const auto same = [&](const data::PreTokenizer& p) { return !pre.is_null() && nlohmann::json(p.to_json()) == pre; };
  if (same(data::PreTokenizer::llama3())) return "llama-bpe";
  if (same(data::PreTokenizer::gpt2())) return "gpt-2";
  fail(path, ": pre_tokenizer ", pre.dump().substr(0, 200),
       " is not one llama.cpp knows by name; GGUF export takes amber's llama3 and gpt2 styles (docs/interop.md)");
}

}  // namespace

std::string gguf_architecture(const ModelConfig& c) {
  const HfArchitecture arch = hf_architecture(c);
  AMBER_CHECK(arch != HfArchitecture::gemma3, "model.post_norm and model.embedding_scale (Gemma3-style): GGUF export "
                                              "writes llama.cpp's llama and qwen3 architectures only (docs/interop.md)");
  AMBER_CHECK(c.moe_experts == 0, "model.moe_experts > 0: GGUF export writes llama.cpp's dense llama and qwen3 "
                                  "architectures only; export the model with `amber export hf` instead "
                                  "(docs/interop.md)");
  AMBER_CHECK(c.mlp == "swiglu", "model.mlp = '", c.mlp,
              "': llama.cpp's llama and qwen3 architectures gate with SiLU (swiglu) only (docs/interop.md)");
  AMBER_CHECK(c.rope_scaling != "yarn", "model.rope_scaling = 'yarn': GGUF export writes no YaRN parameters; "
                                        "linear and NTK scaling export (docs/interop.md)");
  return arch == HfArchitecture::qwen3 ? "qwen3" : "llama";
}

std::vector<GgufEntry> gguf_tokenizer_metadata(const HfTokenizerFiles& tokenizer, int vocab_size) {
  const std::string& path = tokenizer.tokenizer_json;
  const nlohmann::json j = read_tokenizer_json(path);
  const nlohmann::json& model = j.at("model");
  AMBER_CHECK(model.value("type", "BPE") == "BPE" && !model.value("byte_fallback", false), path,
              ": model is not a byte-level BPE without byte fallback, which llama.cpp's gpt2 tokenizer needs");
  AMBER_CHECK(!j.contains("normalizer") || j["normalizer"].is_null(), path,
              ": normalizer is set; llama.cpp's gpt2 tokenizer applies none");
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 5);  // unused
  for (const auto& [token, id] : model.at("vocab").items()) {
    AMBER_CHECK(id.get<int64_t>() < vocab_size, path, ": token id ", id.get<int64_t>(), " is past model.vocab_size ",
                vocab_size);
    tokens[id.get<size_t>()] = token;
    types[id.get<size_t>()] = 1;  // normal
  }
  if (j.contains("added_tokens"))
    for (const nlohmann::json& added : j["added_tokens"]) {
      const size_t id = added.at("id").get<size_t>();
      AMBER_CHECK(id < static_cast<size_t>(vocab_size), path, ": added token id ", id, " is past model.vocab_size ",
                  vocab_size);
      tokens[id] = added.at("content").get<std::string>();
      types[id] = added.value("special", false) ? 3 : 4;  // control, user-defined
    }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (types[id] == 5) tokens[id] = concat("[PAD", id, "]");
  std::vector<std::string> merges;
  for (const nlohmann::json& m : model.at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  std::vector<GgufEntry> out = {{"tokenizer.ggml.model", std::string("gpt2")},
                                {"tokenizer.ggml.pre", pre_tokenizer_name(j, path)},
                                {"tokenizer.ggml.tokens", tokens},
                                {"tokenizer.ggml.token_type", types},
                                {"tokenizer.ggml.merges", merges},
                                {"tokenizer.ggml.add_bos_token", tokenizer.ids.bos.has_value()},
                                {"tokenizer.ggml.add_eos_token", false}};
  if (tokenizer.ids.bos) out.push_back({"tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*tokenizer.ids.bos)});
  if (tokenizer.ids.eos) {
    out.push_back({"tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*tokenizer.ids.eos)});
    out.push_back({"tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*tokenizer.ids.eos)});
  }
  return out;
}

void write_gguf(const LanguageModel& model, const HfTokenizerFiles& tokenizer, const std::string& path, DType dtype) {
  const ModelConfig& c = model.config();
  const std::string arch = gguf_architecture(c);
  const nlohmann::ordered_json hf = hf_config_json(c, tokenizer.ids, "float32");
  const auto u32 = [](int64_t v) { return GgufValue(static_cast<uint32_t>(v)); };
  std::vector<GgufEntry> meta = {
      {"general.architecture", arch},
      {"general.name", std::string("amber")},
      {"general.file_type", u32(dtype == DType::f32 ? 0 : dtype == DType::f16 ? 1 : 32)},
      {arch + ".vocab_size", u32(c.vocab_size)},
      {arch + ".context_length", u32(c.max_position)},
      {arch + ".embedding_length", u32(c.dim)},
      {arch + ".block_count", u32(c.depth)},
      {arch + ".feed_forward_length", u32(c.resolved_mlp_hidden())},
      {arch + ".attention.head_count", u32(c.heads)},
      {arch + ".attention.head_count_kv", u32(c.resolved_kv_heads())},
      {arch + ".attention.key_length", u32(c.resolved_head_dim())},
      {arch + ".attention.value_length", u32(c.resolved_head_dim())},
      {arch + ".rope.dimension_count", u32(c.resolved_head_dim())},
      {arch + ".rope.freq_base", static_cast<float>(hf["rope_theta"].get<double>())},
      {arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps)},
  };
  if (c.rope_scaling == "linear") {
    meta.push_back({arch + ".rope.scaling.type", std::string("linear")});
    meta.push_back({arch + ".rope.scaling.factor", static_cast<float>(c.rope_factor)});
  }
  for (GgufEntry& e : gguf_tokenizer_metadata(tokenizer, c.vocab_size)) meta.push_back(std::move(e));

  AMBER_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
              "GGUF export writes f32, f16 or bf16 weights, not ", dtype_name(dtype));
  std::vector<NamedTensor> tensors;
  for (NamedTensor& t : hf_tensors(model, DType::f32)) {
    const bool rotated = t.name.find("self_attn.q_proj.") != std::string::npos ||
                         t.name.find("self_attn.k_proj.") != std::string::npos;
    Tensor value = arch == "llama" && rotated ? interleave_heads(t.tensor, c.resolved_head_dim()) : t.tensor;
    // Vectors (norm gains, biases) stay f32, as llama.cpp's own converter keeps them.
    tensors.push_back({gguf_name(t.name), value.ndim() == 1 ? value : value.to(dtype)});
  }
  save_gguf(path, meta, tensors);
}

}  // namespace amber
