// GGUF export's choices: which of llama.cpp's architectures, what is refused naming the
// option, and the tokenizer metadata's padding of a vocabulary past the tokenizer's.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <unistd.h>

#include "amber/data/bpe_trainer.h"
#include "amber/data/tokenizer_json.h"
#include "amber/export/gguf_export.h"
#include "data/testing.h"
#include "tiny_model.h"

namespace amber {
namespace {

using data::testing::expect_error;

TEST(GgufExport, ArchitectureFollowsQkNormAndWhatLlamaCppLacksIsRefused) {
  ModelConfig c = testing::tiny_model();
  EXPECT_EQ(gguf_architecture(c), "qwen3");
  c.qk_norm = false;
  EXPECT_EQ(gguf_architecture(c), "llama");
  ModelConfig geglu = c;
  geglu.mlp = "geglu";
  expect_error([&] { gguf_architecture(geglu); }, {"model.mlp = 'geglu'", "SiLU"});
  ModelConfig yarn = c;
  yarn.rope_scaling = "yarn";
  yarn.rope_factor = 2.0;
  expect_error([&] { gguf_architecture(yarn); }, {"model.rope_scaling = 'yarn'"});
  ModelConfig gemma = testing::tiny_model();
  gemma.post_norm = true;
  gemma.embedding_scale = true;
  expect_error([&] { gguf_architecture(gemma); }, {"Gemma3-style", "llama and qwen3"});
  ModelConfig sinks = c;
  sinks.attn_sink = true;
  expect_error([&] { gguf_architecture(sinks); }, {"model.attn_sink"});
  ModelConfig moe = testing::tiny_model();
  moe.moe_experts = 4;
  moe.moe_top_k = 2;
  moe.moe_hidden = 16;
  expect_error([&] { gguf_architecture(moe); }, {"model.moe_experts > 0", "amber export hf"});
}

TEST(GgufExport, TokenizerMetadataPadsTheVocabularyAndNamesThePreTokenizer) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("amber_gguf_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  data::BpeTrainerOptions options;
  options.vocab_size = 300;
  options.special_tokens = {"<|bos|>", "<|eos|>"};
  data::BpeTrainer trainer(options);
  trainer.add_documents({"the cat sat on the mat", "the scientist sat on the cat"});
  const data::Tokenizer tokenizer = trainer.train();
  const std::string path = dir + "/tok.json";
  data::save_tokenizer_json(tokenizer, path);
  const int32_t bos = *tokenizer.token_to_id("<|bos|>");
  const auto meta = gguf_tokenizer_metadata({path, "<|bos|>", "<|eos|>", {bos, std::nullopt}}, 320);
  std::map<std::string, GgufValue> m;
  for (const GgufEntry& e : meta) m.emplace(e.key, e.value);
  const auto& tokens = std::get<std::vector<std::string>>(m.at("tokenizer.ggml.tokens"));
  const auto& types = std::get<std::vector<int32_t>>(m.at("tokenizer.ggml.token_type"));
  ASSERT_EQ(tokens.size(), 320u);
  EXPECT_EQ(tokens[319], "[PAD319]");
  EXPECT_EQ(types[319], 5);
  EXPECT_EQ(tokens[static_cast<size_t>(bos)], "<|bos|>");
  EXPECT_EQ(types[static_cast<size_t>(bos)], 3);
  EXPECT_EQ(std::get<std::string>(m.at("tokenizer.ggml.pre")), "llama-bpe");
  EXPECT_EQ(std::get<uint32_t>(m.at("tokenizer.ggml.bos_token_id")), static_cast<uint32_t>(bos));
  EXPECT_EQ(m.count("tokenizer.ggml.eos_token_id"), 0u);
  expect_error([&] { gguf_tokenizer_metadata({path, "", "", {}}, 100); }, {"past model.vocab_size 100"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace amber
