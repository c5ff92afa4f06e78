#include "amber/export/hf_folder.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include <unistd.h>

#include "amber/export/hf_weights.h"
#include "amber/io/safetensors.h"

namespace amber {
namespace fs = std::filesystem;
namespace {

void write_json(const fs::path& path, const nlohmann::ordered_json& j) {
  std::ofstream out(path, std::ios::trunc);
  AMBER_CHECK(out, "cannot write ", path.string());
  out << j.dump(2) << "\n";
  out.flush();
  AMBER_CHECK(out, "writing ", path.string(), " failed (disk full?)");
}

nlohmann::json read_json(const fs::path& path) {
  AMBER_CHECK(fs::is_regular_file(path), path.string(), " is missing: ", path.parent_path().string(),
              " is not a Hugging Face model folder");
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), " is not valid JSON (", e.what(), ")");
  }
}

std::string shard_name(size_t index, size_t count) {
  std::ostringstream s;
  s << "model-" << std::setw(5) << std::setfill('0') << index + 1 << "-of-" << std::setw(5) << std::setfill('0')
    << count << ".safetensors";
  return s.str();
}

// The weights as one model.safetensors, or in order as shards of at most `shard_bytes`
// each (a tensor larger than that alone in its shard) with the index transformers reads.
void write_weights(const fs::path& dir, const std::vector<NamedTensor>& tensors, int64_t shard_bytes) {
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::vector<NamedTensor>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const NamedTensor& t : tensors) {
    const int64_t bytes = static_cast<int64_t>(t.tensor.bytes());
    if (!shards.back().empty() && in_shard + bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    save_safetensors((dir / "model.safetensors").string(), tensors, metadata);
    return;
  }
  nlohmann::ordered_json index;
  index["metadata"]["total_size"] = total;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i, shards.size());
    save_safetensors((dir / name).string(), shards[i], metadata);
    for (const NamedTensor& t : shards[i]) index["weight_map"][t.name] = name;
  }
  write_json(dir / "model.safetensors.index.json", index);
}

// A post-processor that puts bos before every text, as amber's loader does before every
// document, so that Hugging Face's tokenizer (add_special_tokens, its default) encodes
// what the model was trained on. A file with a post-processor of its own keeps it.
void add_bos_post_processor(nlohmann::ordered_json& tokenizer, const std::string& bos, int32_t id) {
  if (tokenizer.contains("post_processor") && !tokenizer["post_processor"].is_null()) return;
  const auto special = [&](int type_id) {
    return nlohmann::ordered_json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
  };
  const auto sequence = [](const char* name, int type_id) {
    return nlohmann::ordered_json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  tokenizer["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {special(0), sequence("A", 0)}},
      {"pair", {special(0), sequence("A", 0), special(1), sequence("B", 1)}},
      {"special_tokens", {{bos, {{"id", bos}, {"ids", {id}}, {"tokens", {bos}}}}}}};
}

void write_tokenizer(const fs::path& dir, const HfTokenizerFiles& t, int max_position) {
  nlohmann::ordered_json tokenizer;
  {
    std::ifstream in(t.tokenizer_json);
    try {
      tokenizer = nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(t.tokenizer_json, " is not valid JSON (", e.what(), ")");
    }
  }
  if (t.ids.bos) add_bos_post_processor(tokenizer, t.bos, *t.ids.bos);
  write_json(dir / "tokenizer.json", tokenizer);
  nlohmann::ordered_json config;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["model_max_length"] = max_position;
  config["clean_up_tokenization_spaces"] = false;
  if (!t.bos.empty()) config["bos_token"] = t.bos;
  if (!t.eos.empty()) config["eos_token"] = t.eos;
  // Batched generation pads; the end of text is the token that means nothing follows.
  if (!t.eos.empty()) config["pad_token"] = t.eos;
  write_json(dir / "tokenizer_config.json", config);
}

nlohmann::ordered_json generation_config(const HfSpecialTokens& ids) {
  nlohmann::ordered_json g;
  if (ids.bos) g["bos_token_id"] = *ids.bos;
  if (ids.eos) {
    g["eos_token_id"] = *ids.eos;
    g["pad_token_id"] = *ids.eos;
  }
  return g;
}

}  // namespace

void write_hf_folder(const LanguageModel& model, const HfTokenizerFiles& tokenizer, const std::string& out_dir,
                     const HfExportOptions& options) {
  AMBER_CHECK(options.shard_bytes > 0, "the shard size must be positive, got ", options.shard_bytes, " bytes");
  const fs::path out(out_dir);
  AMBER_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)), out_dir,
              " already exists and is not an empty folder; choose another --out or remove it");
  const std::string dtype = options.dtype == DType::bf16 ? "bfloat16" : "float32";
  // Refusals and the name map run before anything is written.
  const nlohmann::ordered_json config = hf_config_json(model.config(), tokenizer.ids, dtype);
  const std::vector<NamedTensor> tensors = hf_tensors(model, options.dtype);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  const fs::path temporary = out.string() + ".tmp-" + std::to_string(getpid());
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  try {
    write_weights(temporary, tensors, options.shard_bytes);
    write_json(temporary / "config.json", config);
    write_json(temporary / "generation_config.json", generation_config(tokenizer.ids));
    write_tokenizer(temporary, tokenizer, model.config().max_position);
    if (fs::exists(out)) fs::remove(out);
    fs::rename(temporary, out);
  } catch (...) {
    fs::remove_all(temporary);
    throw;
  }
}

std::map<std::string, Tensor> read_hf_tensors(const std::string& dir) {
  const fs::path root(dir), index_path = root / "model.safetensors.index.json";
  AMBER_CHECK(fs::is_directory(root), dir, " does not exist or is not a folder; give a Hugging Face model folder");
  if (!fs::exists(index_path)) {
    AMBER_CHECK(fs::exists(root / "model.safetensors"), dir,
                " holds neither model.safetensors nor model.safetensors.index.json; amber imports safetensors "
                "checkpoints only");
    return load_safetensors((root / "model.safetensors").string()).tensors;
  }
  const nlohmann::json index = read_json(index_path);
  AMBER_CHECK(index.contains("weight_map") && index["weight_map"].is_object(), index_path.string(),
              ": \"weight_map\" is missing or not an object");
  std::map<std::string, std::set<std::string>> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    AMBER_CHECK(file.is_string(), index_path.string(), ": the shard of '", name, "' is not a file name");
    by_file[file.get<std::string>()].insert(name);
  }
  std::map<std::string, Tensor> tensors;
  for (const auto& [file, names] : by_file) {
    SafetensorsFile shard = load_safetensors((root / file).string());
    for (const std::string& name : names) {
      auto it = shard.tensors.find(name);
      AMBER_CHECK(it != shard.tensors.end(), index_path.string(), " places '", name, "' in ", file,
                  ", which does not hold it; the folder is incomplete or mixed");
      tensors.emplace(name, std::move(it->second));
    }
  }
  return tensors;
}

namespace {

// A config's RoPE as {"rope_theta", "rope_type", "factor"}: transformers before 5 writes
// rope_theta and rope_scaling, from 5 on one rope_parameters object that holds both.
nlohmann::json rope_of(const nlohmann::json& config) {
  nlohmann::json scaling = config.value("rope_scaling", nlohmann::json());
  nlohmann::json theta = config.value("rope_theta", nlohmann::json(10000.0));
  if (config.contains("rope_parameters") && config["rope_parameters"].is_object()) {
    scaling = config["rope_parameters"];
    theta = scaling.value("rope_theta", theta);
  }
  nlohmann::json rope = {{"rope_theta", theta}, {"rope_type", "default"}, {"factor", 1.0}};
  if (scaling.is_object()) {
    rope["rope_type"] = scaling.value("rope_type", scaling.value("type", nlohmann::json("default")));
    if (rope["rope_type"] != "default") rope["factor"] = scaling.value("factor", nlohmann::json(nullptr));
  }
  return rope;
}

// Equal JSON values, numbers within a relative 1e-9 (a float written by another tool).
bool matches(const nlohmann::json& value, const nlohmann::json& expected) {
  if (value.is_number() && expected.is_number())
    return std::abs(value.get<double>() - expected.get<double>()) <= 1e-9 * std::abs(expected.get<double>());
  return value == expected;
}

}  // namespace

void check_hf_config(const std::string& dir, const ModelConfig& c) {
  AMBER_CHECK(hf_architecture(c) != HfArchitecture::gemma3,
              "--init-from imports Llama and Qwen3 checkpoints, but the run's model is Gemma3-style "
              "(model.post_norm, model.embedding_scale); docs/interop.md");
  const fs::path path = fs::path(dir) / "config.json";
  const nlohmann::json have = read_json(path);
  const nlohmann::json want = nlohmann::json::parse(hf_config_json(c, {}, "float32").dump());
  // config.json key -> the model option that sets it, and its value when a file omits
  // it (as published configs do for their classes' defaults).
  const auto field = [&](const char* key, const char* option, const nlohmann::json& fallback) {
    const nlohmann::json value = have.contains(key) ? have[key] : fallback;
    const nlohmann::json& expected = want.contains(key) ? want[key] : nlohmann::json(false);
    AMBER_CHECK(matches(value, expected), path.string(), ": ", key, " is ", value.dump(), " but the run's model config gives ",
                expected.dump(), "; set ", option, " to match the checkpoint");
  };
  AMBER_CHECK(have.is_object(), path.string(), " is not a JSON object");
  field("model_type", "model.qk_norm (true: qwen3, false: llama), model.moe_experts and model.moe_router "
                      "(qwen3_moe: softmax, glm4_moe: sigmoid)", nullptr);
  field("vocab_size", "model.vocab_size", nullptr);
  field("hidden_size", "model.dim", nullptr);
  field("intermediate_size", "model.mlp_hidden", nullptr);
  field("num_hidden_layers", "model.depth", nullptr);
  field("num_attention_heads", "model.heads", nullptr);
  const nlohmann::json heads = have.value("num_attention_heads", nlohmann::json(0));
  field("num_key_value_heads", "model.kv_heads", heads);
  const nlohmann::json hidden = have.value("hidden_size", nlohmann::json(0));
  field("head_dim", "model.head_dim",
        heads.is_number_integer() && hidden.is_number_integer() && heads.get<int64_t>() > 0
            ? nlohmann::json(hidden.get<int64_t>() / heads.get<int64_t>())
            : nlohmann::json(nullptr));
  field("hidden_act", "model.mlp (silu: swiglu, gelu_pytorch_tanh: geglu)", "silu");
  field("rms_norm_eps", "model.norm_eps", nullptr);
  const nlohmann::json have_rope = rope_of(have), want_rope = rope_of(want);
  for (const auto& [key, option] : {std::pair{"rope_theta", "model.rope_theta (with model.rope_scaling)"},
                                    std::pair{"rope_type", "model.rope_scaling"},
                                    std::pair{"factor", "model.rope_factor"}}) {
    const nlohmann::json &value = have_rope[key], &expected = want_rope[key];
    AMBER_CHECK(matches(value, expected), path.string(), ": RoPE ", key, " is ", value.dump(), " but the run's model config gives ",
                expected.dump(), "; set ", option, " to match the checkpoint");
  }
  const nlohmann::json windows = have.value("use_sliding_window", nlohmann::json(false));
  AMBER_CHECK(windows == false, path.string(), ": use_sliding_window is ", windows.dump(),
              "; amber imports Qwen3 checkpoints whose layers all attend globally");
  field("attention_bias", "model.attn_bias", false);
  if (want.contains("mlp_bias")) field("mlp_bias", "model.attn_bias (amber's biases cover the MLP too)", false);
  field("tie_word_embeddings", "model.tie_embeddings", false);
  if (want.contains("n_routed_experts")) {
    field("n_routed_experts", "model.moe_experts", nullptr);
    field("n_shared_experts", "model.moe_shared_experts", nullptr);
    field("num_experts_per_tok", "model.moe_top_k", nullptr);
    field("moe_intermediate_size", "model.moe_hidden", nullptr);
    field("norm_topk_prob", "model.moe_normalize", true);
    field("routed_scaling_factor", "model.moe_routed_scaling", 1.0);
    field("first_k_dense_replace", "model.moe_first_dense", nullptr);
    field("n_group", "(amber chooses among all experts: n_group 1)", 1);
    field("topk_group", "(amber chooses among all experts: topk_group 1)", 1);
    field("use_qk_norm", "model.qk_norm", false);
    // Glm4Moe rotates half of each head unless told otherwise; amber rotates all of it.
    const nlohmann::json rope_parameters = have.value("rope_parameters", nlohmann::json::object());
    const nlohmann::json partial = have.value(
        "partial_rotary_factor", rope_parameters.is_object() ? rope_parameters.value("partial_rotary_factor", 0.5) : 0.5);
    AMBER_CHECK(matches(partial, 1.0), path.string(), ": partial_rotary_factor is ", partial.dump(),
                "; amber imports Glm4Moe checkpoints that rotate every channel of a head (1.0)");
  }
  if (want.contains("num_experts")) {
    // transformers 5 writes the count as num_local_experts.
    field("num_experts", "model.moe_experts", have.value("num_local_experts", nlohmann::json(nullptr)));
    field("num_experts_per_tok", "model.moe_top_k", nullptr);
    field("moe_intermediate_size", "model.moe_hidden", nullptr);
    field("norm_topk_prob", "model.moe_normalize", false);
    field("decoder_sparse_step", "model.moe_every (amber writes 1 and lists the dense layers)", 1);
    field("mlp_only_layers", "model.moe_first_dense and model.moe_every", nlohmann::json::array());
  }
}

}  // namespace amber
