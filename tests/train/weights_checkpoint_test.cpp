// A weights-only checkpoint for release (amber export weights): the weights in bf16 or
// f32 with the run config, readable as any checkpoint, refused by a resume.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "amber/train/checkpoint.h"
#include "tiny_model.h"

namespace amber {
namespace {
namespace fs = std::filesystem;

struct Release {
  std::string dir =
      (fs::temp_directory_path() / ("amber_release_" + std::to_string(::getpid()))).string();
  LanguageModel model{testing::tiny_model()};
  const nlohmann::json state = {{"config", "[model]\ndim = 8\n"}, {"step", 7}, {"tokens_seen", 123}};
  Release() {
    fs::remove_all(dir);
    model.init_weights(5);
  }
  ~Release() { fs::remove_all(dir); }
};

TEST(WeightsCheckpoint, Bf16HoldsTheWeightsRoundedOnceAndTheRunConfig) {
  Release r;
  save_weights_checkpoint(r.dir + "/", r.model, r.state, DType::bf16, "");
  LanguageModel loaded(testing::tiny_model());
  const nlohmann::json state = load_checkpoint(r.dir, loaded, nullptr);
  EXPECT_TRUE(state.at("weights_only").get<bool>());
  EXPECT_EQ(state.at("step").get<int64_t>(), 7);
  EXPECT_EQ(state.at("config"), r.state.at("config"));
  EXPECT_FALSE(state.contains("tokens_seen")) << "a release carries no data position";
  for (size_t i = 0; i < r.model.params().size(); ++i) {
    const Tensor& original = r.model.params()[i]->value;
    EXPECT_EQ(loaded.params()[i]->value.to_doubles(), original.to(DType::bf16).to(DType::f32).to_doubles())
        << r.model.params()[i]->name;
  }
  EXPECT_FALSE(fs::exists(r.dir + "/optimizer.safetensors"));
}

TEST(WeightsCheckpoint, F32IsExact) {
  Release r;
  save_weights_checkpoint(r.dir, r.model, r.state, DType::f32, "");
  LanguageModel loaded(testing::tiny_model());
  load_checkpoint(r.dir, loaded, nullptr);
  for (size_t i = 0; i < r.model.params().size(); ++i)
    EXPECT_EQ(loaded.params()[i]->value.to_doubles(), r.model.params()[i]->value.to_doubles());
}

TEST(WeightsCheckpoint, AResumeIsRefusedAndAnOccupiedFolderIsKept) {
  Release r;
  save_weights_checkpoint(r.dir, r.model, r.state, DType::bf16, "");
  LanguageModel loaded(testing::tiny_model());
  const auto optimizer = build_optimizer({}, loaded.store());
  try {
    load_checkpoint(r.dir, loaded, optimizer.get());
    FAIL() << "a weights-only checkpoint was resumed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights-only checkpoint"), std::string::npos) << e.what();
  }
  try {
    save_weights_checkpoint(r.dir, r.model, r.state, DType::f32, "");
    FAIL() << "an occupied folder was overwritten";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(r.dir + "/model.safetensors"));
}

}  // namespace
}  // namespace amber
