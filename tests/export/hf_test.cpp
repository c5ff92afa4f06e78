// Hugging Face export and import: the name map's inverse gives back every weight bit
// for bit, the folder holds what transformers reads (sharded with an index above the
// size), the depth residual scale and the fused gate/up land where a stock class
// expects them, and what no stock class computes is refused naming the option.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "amber/export/hf_folder.h"
#include "amber/export/hf_weights.h"
#include "data/testing.h"
#include "tiny_model.h"

namespace amber {
namespace {

namespace fs = std::filesystem;
using data::testing::expect_error;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("amber_hf_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

ModelConfig llama_with_biases() {
  ModelConfig c = testing::tiny_model();
  c.qk_norm = false;
  c.attn_bias = true;
  c.tie_embeddings = true;
  return c;
}

// Qwen3-MoE's shape: a dense first layer, then softmax top-2 of 4 experts.
ModelConfig qwen3_moe() {
  ModelConfig c = testing::tiny_model();
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_hidden = 16;
  c.moe_first_dense = 1;
  return c;
}

// GLM-4.5's (DeepSeek-V3's) MoE: sigmoid routing, a shared expert, a routed scale and
// the balance bias.
ModelConfig glm4_moe() {
  ModelConfig c = qwen3_moe();
  c.moe_router = "sigmoid";
  c.moe_shared_experts = 1;
  c.moe_routed_scaling = 2.5;
  c.moe_bias_update_rate = 1e-3;
  return c;
}

// A random model (norm gains and biases too, so that a swapped or dropped vector shows).
std::unique_ptr<LanguageModel> random_model(const ModelConfig& c, uint64_t seed) {
  auto model = std::make_unique<LanguageModel>(c);
  model->init_weights(seed);
  uint64_t s = seed;
  std::vector<Tensor> vectors;
  for (const auto& p : model->params())
    if (p->value.ndim() == 1) vectors.push_back(p->value);
  for (const auto& [name, buffer] : model->buffers()) vectors.push_back(buffer);
  for (Tensor& t : vectors) {
    float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      s = s * 6364136223846793005ull + 1;
      v[i] = static_cast<float>((s >> 40) % 1000) / 500.0f;
    }
  }
  model->refresh_working_copies();
  return model;
}

// A tokenizer file for the folder; export copies it, import does not read it.
HfTokenizerFiles tokenizer_files(const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path path = dir / "tokenizer.json";
  data::testing::write_file(path.string(), "{}");
  return {path.string(), "<|bos|>", "<|eos|>", {1, 2}};
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_same_weights(const LanguageModel& a, const LanguageModel& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i)
    EXPECT_EQ(a.params()[i]->value.to_doubles(), b.params()[i]->value.to_doubles()) << a.params()[i]->name;
  ASSERT_EQ(a.buffers().size(), b.buffers().size());
  for (size_t i = 0; i < a.buffers().size(); ++i)
    EXPECT_EQ(a.buffers()[i].second.to_doubles(), b.buffers()[i].second.to_doubles()) << a.buffers()[i].first;
}

TEST(HfExport, ExportThenImportGivesIdenticalWeightsForEachClass) {
  for (const ModelConfig& c : {testing::tiny_model(), llama_with_biases(), qwen3_moe(), glm4_moe()}) {
    TempDir tmp;
    const auto model = random_model(c, 7);
    write_hf_folder(*model, tokenizer_files(tmp.path / "tok"), (tmp.path / "hf").string(), {});
    check_hf_config((tmp.path / "hf").string(), c);
    LanguageModel back(c);
    back.init_weights(99);
    load_hf_tensors(read_hf_tensors((tmp.path / "hf").string()), back, "hf");
    expect_same_weights(*model, back);
  }
}

TEST(HfExport, LargeWeightsAreShardedWithAnIndexThatLoadsBack) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_model();
  const auto model = random_model(c, 3);
  const fs::path out = tmp.path / "hf";
  write_hf_folder(*model, tokenizer_files(tmp.path / "tok"), out.string(), {DType::f32, 16 << 10});
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  const nlohmann::json index = read_json(out / "model.safetensors.index.json");
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_GT(files.size(), 2u);
  EXPECT_TRUE(files.count("model-00001-of-0000" + std::to_string(files.size()) + ".safetensors"));
  int64_t total = 0;
  for (const NamedTensor& t : hf_tensors(*model, DType::f32)) total += static_cast<int64_t>(t.tensor.bytes());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  LanguageModel back(c);
  load_hf_tensors(read_hf_tensors(out.string()), back, "hf");
  expect_same_weights(*model, back);
}

TEST(HfExport, ConfigNamesTheStockClassAndTheFolderItsTokens) {
  TempDir tmp;
  ModelConfig c = testing::tiny_model();
  c.mlp = "geglu";
  c.rope_scaling = "yarn";
  c.rope_factor = 4.0;
  const auto model = random_model(c, 1);
  const fs::path out = tmp.path / "hf";
  write_hf_folder(*model, tokenizer_files(tmp.path / "tok"), out.string(), {DType::bf16, int64_t{1} << 30});
  const nlohmann::json j = read_json(out / "config.json");
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(j["hidden_act"], "gelu_pytorch_tanh");
  EXPECT_EQ(j["intermediate_size"], 64);
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(j["rope_scaling"]["factor"], 4.0);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["bos_token_id"], 1);
  const nlohmann::json t = read_json(out / "tokenizer_config.json");
  EXPECT_EQ(t["bos_token"], "<|bos|>");
  EXPECT_EQ(t["pad_token"], "<|eos|>");
  EXPECT_EQ(read_json(out / "generation_config.json")["eos_token_id"], 2);
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  EXPECT_EQ(load_safetensors((out / "model.safetensors").string()).tensors.at("model.norm.weight").dtype(),
            DType::bf16);

  const ModelConfig llama = llama_with_biases();
  EXPECT_EQ(hf_config_json(llama, {}, "float32")["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(hf_config_json(llama, {}, "float32")["mlp_bias"], true);
  ModelConfig ntk = llama;
  ntk.rope_scaling = "ntk";
  ntk.rope_factor = 2.0;
  EXPECT_DOUBLE_EQ(hf_config_json(ntk, {}, "float32")["rope_theta"].get<double>(), 10000.0 * std::pow(2.0, 8.0 / 6.0));
  EXPECT_TRUE(hf_config_json(ntk, {}, "float32")["rope_scaling"].is_null());
}

TEST(HfExport, GateUpIsSplitAndTheResidualScaleFoldedIntoOutputProjections) {
  ModelConfig c = llama_with_biases();
  c.scale_residual_by_depth = true;
  const auto model = random_model(c, 5);
  std::map<std::string, Tensor> hf;
  for (const NamedTensor& t : hf_tensors(*model, DType::f32)) hf.emplace(t.name, t.tensor);
  const Tensor gate_up = model->param("layers.1.mlp.gate_up_proj.weight").value;
  EXPECT_EQ(hf.at("model.layers.1.mlp.gate_proj.weight").to_doubles(), gate_up.slice(0, 0, 64).to_doubles());
  EXPECT_EQ(hf.at("model.layers.1.mlp.up_proj.weight").to_doubles(), gate_up.slice(0, 64, 128).to_doubles());
  const double rs = 1.0 / std::sqrt(2.0);
  for (const char* name : {"attn.o_proj.weight", "attn.o_proj.bias", "mlp.down_proj.bias"}) {
    const std::vector<double> ours = model->param(std::string("layers.0.") + name).value.to_doubles();
    const std::vector<double> theirs = hf.at(std::string("model.layers.0.") + (name[0] == 'a' ? "self_" : "") + name).to_doubles();
    for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ(theirs[i], static_cast<float>(ours[i] * rs)) << name;
  }
  EXPECT_EQ(hf.count("lm_head.weight"), 0u) << "tied: the head is the embedding";
  EXPECT_EQ(hf.count("model.layers.0.self_attn.q_norm.weight"), 0u);
}

TEST(HfExport, QkNormWithoutGainsExportsOnesAndImportRefusesTrainedGains) {
  TempDir tmp;
  ModelConfig c = testing::tiny_model();
  c.qk_norm_affine = false;
  const auto model = random_model(c, 2);
  std::map<std::string, Tensor> hf;
  for (const NamedTensor& t : hf_tensors(*model, DType::f32)) hf.emplace(t.name, t.tensor);
  EXPECT_EQ(hf.at("model.layers.0.self_attn.k_norm.weight").to_doubles(), std::vector<double>(8, 1.0));
  hf.at("model.layers.0.self_attn.k_norm.weight").data<float>()[3] = 0.5f;
  LanguageModel back(c);
  expect_error([&] { load_hf_tensors(hf, back, "hf"); }, {"model.layers.0.self_attn.k_norm.weight",
                                                          "model.qk_norm_affine = true"});
}

ModelConfig gemma3_style() {
  ModelConfig c = testing::tiny_model();
  c.depth = 3;
  c.post_norm = true;
  c.embedding_scale = true;
  c.mlp = "geglu";
  c.sliding_window = 16;
  c.global_layer_every = 2;
  c.scale_residual_by_depth = true;
  c.tie_embeddings = true;
  return c;
}

TEST(HfExport, Gemma3StylesGainsAreOneLessAndTheResidualScaleSitsInThePostNorms) {
  const ModelConfig c = gemma3_style();
  const nlohmann::ordered_json j = hf_config_json(c, {}, "float32");
  EXPECT_EQ(j["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_EQ(j["model_type"], "gemma3_text");
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(j["query_pre_attn_scalar"], 8);
  EXPECT_EQ(j["sliding_window"], 16);
  // Layer 2 is global as the last layer, layer 1 as every second.
  EXPECT_EQ(j["layer_types"], nlohmann::ordered_json({"sliding_attention", "full_attention", "full_attention"}));
  const auto model = random_model(c, 6);
  std::map<std::string, Tensor> hf;
  for (const NamedTensor& t : hf_tensors(*model, DType::f32)) hf.emplace(t.name, t.tensor);
  const double rs = 1.0 / std::sqrt(3.0);
  const auto expect_mapped = [&](const std::string& theirs, const std::string& ours, double scale) {
    const std::vector<double> a = model->param(ours).value.to_doubles(), b = hf.at(theirs).to_doubles();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(b[i], static_cast<float>(a[i] * scale - 1.0)) << theirs;
  };
  expect_mapped("model.layers.1.input_layernorm.weight", "layers.1.attn_norm.weight", 1.0);
  expect_mapped("model.layers.1.pre_feedforward_layernorm.weight", "layers.1.mlp_norm.weight", 1.0);
  expect_mapped("model.layers.1.post_attention_layernorm.weight", "layers.1.post_attn_norm.weight", rs);
  expect_mapped("model.layers.1.post_feedforward_layernorm.weight", "layers.1.post_mlp_norm.weight", rs);
  expect_mapped("model.layers.0.self_attn.q_norm.weight", "layers.0.attn.q_norm.weight", 1.0);
  expect_mapped("model.norm.weight", "norm.weight", 1.0);
  EXPECT_EQ(hf.at("model.layers.0.self_attn.o_proj.weight").to_doubles(),
            model->param("layers.0.attn.o_proj.weight").value.to_doubles());
  ModelConfig gainless = c;
  gainless.qk_norm_affine = false;
  for (const NamedTensor& t : hf_tensors(LanguageModel(gainless), DType::f32)) {
    if (t.name == "model.layers.0.self_attn.q_norm.weight") {
      EXPECT_EQ(t.tensor.to_doubles(), std::vector<double>(8, 0.0)) << "Gemma3's (1 + 0) is a gain of one";
    }
  }
  expect_error([&] { check_hf_config("anywhere", c); }, {"--init-from imports Llama and Qwen3", "Gemma3-style"});
}

TEST(HfExport, WhatNoStockClassComputesIsRefusedNamingTheOption) {
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> cases = {
      {[](ModelConfig& c) { c.attn_sink = true; }, "model.attn_sink"},
      {[](ModelConfig& c) { c.post_norm = true; }, "model.post_norm without model.embedding_scale"},
      {[](ModelConfig& c) { c.embedding_scale = true; }, "model.embedding_scale without model.post_norm"},
      {[](ModelConfig& c) { c.sliding_window = 16; }, "model.sliding_window"},
      {[](ModelConfig& c) {
         c = gemma3_style();
         c.qk_norm = false;
       },
       "without model.qk_norm"},
      {[](ModelConfig& c) {
         c = gemma3_style();
         c.window_pattern = {8, 16, 0};
       },
       "several window widths"},
      {[](ModelConfig& c) {
         c = gemma3_style();
         c.rope_scaling = "linear";
         c.rope_factor = 2.0;
       },
       "model.rope_scaling = 'linear' with sliding windows"},
      {[](ModelConfig& c) { c.rope_partial = 0.5; }, "model.rope_partial"},
      {[](ModelConfig& c) { c.norm = "layernorm"; }, "model.norm = 'layernorm'"},
      {[](ModelConfig& c) { c.mlp = "gelu"; }, "model.mlp = 'gelu'"},
      {[](ModelConfig& c) { c.attn_bias = true; }, "model.qk_norm with model.attn_bias"},
      {[](ModelConfig& c) {
         c = qwen3_moe();
         c.moe_shared_experts = 1;
       },
       "model.moe_shared_experts > 0"},
      {[](ModelConfig& c) {
         c = qwen3_moe();
         c.moe_router = "sqrt_softplus";
       },
       "model.moe_router = 'sqrt_softplus'"},
      {[](ModelConfig& c) {
         c = glm4_moe();
         c.moe_every = 2;
       },
       "model.moe_every = 2"},
      {[](ModelConfig& c) {
         c = qwen3_moe();
         c.moe_bias_update_rate = 1e-3;
       },
       "model.moe_bias_update_rate"},
      {[](ModelConfig& c) {
         c = qwen3_moe();
         c.qk_norm = false;
       },
       "model.moe_experts > 0 without model.qk_norm"},
  };
  for (const auto& [change, option] : cases) {
    ModelConfig c = testing::tiny_model();
    change(c);
    expect_error([&] { hf_architecture(c); }, {option, "docs/interop.md"});
  }
}

TEST(HfExport, ImportNamesTheMismatchedTensorOrConfigField) {
  TempDir tmp;
  const ModelConfig c = testing::tiny_model();
  const auto model = random_model(c, 4);
  const fs::path out = tmp.path / "hf";
  write_hf_folder(*model, tokenizer_files(tmp.path / "tok"), out.string(), {});
  ModelConfig wider = c;
  wider.mlp_hidden = 96;
  expect_error([&] { check_hf_config(out.string(), wider); },
               {"config.json: intermediate_size is 64", "gives 96", "model.mlp_hidden"});
  LanguageModel wide(wider);
  expect_error([&] { load_hf_tensors(read_hf_tensors(out.string()), wide, out.string()); },
               {"model.layers.0.mlp.gate_proj.weight", "shape [64, 32]", "needs [96, 32]"});
  ModelConfig llama = c;
  llama.qk_norm = false;
  expect_error([&] { check_hf_config(out.string(), llama); }, {"model_type is \"qwen3\"", "model.qk_norm"});
  LanguageModel no_norm(llama);
  expect_error([&] { load_hf_tensors(read_hf_tensors(out.string()), no_norm, out.string()); },
               {"'model.layers.0.self_attn.k_norm.weight' has no place"});
  expect_error([&] { write_hf_folder(*model, tokenizer_files(tmp.path / "tok"), out.string(), {}); },
               {"already exists", "choose another --out"});
  expect_error([&] { read_hf_tensors((tmp.path / "tok").string()); }, {"neither model.safetensors"});
}

// transformers 5 writes RoPE as one rope_parameters object, earlier versions as
// rope_theta and rope_scaling; import reads both.
TEST(HfExport, ImportReadsRopeParametersAsTransformers5WritesThem) {
  TempDir tmp;
  ModelConfig c = testing::tiny_model();
  c.rope_theta = 1e6;
  c.rope_scaling = "linear";
  c.rope_factor = 2.0;
  const fs::path dir = tmp.path / "hf";
  fs::create_directories(dir);
  nlohmann::json j = nlohmann::json::parse(hf_config_json(c, {}, "float32").dump());
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}};
  const auto write = [&] { data::testing::write_file((dir / "config.json").string(), j.dump()); };
  write();
  check_hf_config(dir.string(), c);
  j["rope_parameters"]["factor"] = 4.0;
  write();
  expect_error([&] { check_hf_config(dir.string(), c); }, {"RoPE factor is 4.0", "gives 2.0", "model.rope_factor"});
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  write();
  expect_error([&] { check_hf_config(dir.string(), c); }, {"RoPE rope_type is \"default\"", "model.rope_scaling"});
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}};
  j["use_sliding_window"] = true;
  write();
  expect_error([&] { check_hf_config(dir.string(), c); }, {"use_sliding_window is true"});
}

}  // namespace
}  // namespace amber
