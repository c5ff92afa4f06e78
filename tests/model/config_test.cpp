#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "amber/core/error.h"
#include "amber/model/config.h"

namespace amber {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, UnknownKeyIsNamedWithASuggestion) {
  const std::string msg = error_of([] { model_config_from_toml_string("[model]\nheds = 8\n", "x.toml"); });
  EXPECT_NE(msg.find("model.heds"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean model.heads"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x.toml"), std::string::npos) << msg;
}

TEST(ModelConfig, WrongTypeNamesKeyAndTypes) {
  const std::string msg = error_of([] { model_config_from_toml_string("[model]\ndim = \"wide\"\n"); });
  EXPECT_NE(msg.find("model.dim must be an integer, got a string"), std::string::npos) << msg;
  const std::string msg2 = error_of([] { model_config_from_toml_string("[model]\nqk_norm = 1\n"); });
  EXPECT_NE(msg2.find("model.qk_norm must be true or false"), std::string::npos) << msg2;
}

TEST(ModelConfig, HeadsMustDivideDimUnlessHeadDimIsGiven) {
  const std::string msg =
      error_of([] { model_config_from_toml_string("[model]\ndim = 100\nheads = 7\nkv_heads = 7\n"); });
  EXPECT_NE(msg.find("model.heads = 7 does not divide model.dim = 100"), std::string::npos) << msg;
  const ModelConfig ok = model_config_from_toml_string("[model]\ndim = 100\nheads = 7\nkv_heads = 7\nhead_dim = 16\n");
  EXPECT_EQ(ok.resolved_head_dim(), 16);
  const std::string gqa = error_of([] { model_config_from_toml_string("[model]\nheads = 16\nkv_heads = 3\n"); });
  EXPECT_NE(gqa.find("model.kv_heads = 3"), std::string::npos) << gqa;
}

TEST(ModelConfig, MoeFieldsAreCheckedAndChooseTheSparseLayers) {
  const std::string base = "[model]\ndepth = 6\nmoe_experts = 8\nmoe_hidden = 64\n";
  const ModelConfig c = model_config_from_toml_string(base + "moe_top_k = 2\nmoe_first_dense = 1\nmoe_every = 2\n");
  std::vector<int> sparse;
  for (int l = 0; l < 6; ++l)
    if (c.layer_is_sparse(l)) sparse.push_back(l);
  EXPECT_EQ(sparse, (std::vector<int>{1, 3, 5}));
  EXPECT_FALSE(model_config_from_toml_string("[model]\n").layer_is_sparse(0));
  const auto msg = [&](const std::string& extra) { return error_of([&] { model_config_from_toml_string(base + extra); }); };
  EXPECT_NE(msg("moe_top_k = 9\n").find("model.moe_top_k = 9 must be between 1 and model.moe_experts = 8"),
            std::string::npos);
  EXPECT_NE(msg("moe_router = \"sigmoidal\"\n").find("not one of: softmax, sigmoid, sqrt_softplus"),
            std::string::npos);
  EXPECT_NE(msg("moe_first_dense = 6\n").find("must leave at least one of the 6 layers sparse"), std::string::npos);
  EXPECT_NE(msg("mlp = \"gelu\"\n").find("MoE experts are SwiGLU"), std::string::npos);
  const std::string hidden =
      error_of([] { model_config_from_toml_string("[model]\nmoe_experts = 8\n"); });
  EXPECT_NE(hidden.find("model.moe_hidden"), std::string::npos) << hidden;
  const std::string direct = error_of([] { model_config_from_toml_string("[model]\nmlp = \"moe\"\n"); });
  EXPECT_NE(direct.find("sparse layers come from model.moe_experts"), std::string::npos) << direct;
}

TEST(ModelConfig, ExtendsAndOverridesCompose) {
  const auto dir = std::filesystem::temp_directory_path() / "amber_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "base.toml") << "[model]\ndim = 256\nheads = 4\nkv_heads = 2\ndepth = 3\n";
  std::ofstream(dir / "child.toml") << "extends = \"base.toml\"\n[model]\ndepth = 5\nsliding_window = 64\n";
  const ModelConfig c = load_model_config((dir / "child.toml").string(), {"model.mlp_hidden=512", "model.rope_scaling=yarn"});
  EXPECT_EQ(c.dim, 256);
  EXPECT_EQ(c.depth, 5);
  EXPECT_EQ(c.mlp_hidden, 512);
  EXPECT_EQ(c.rope_scaling, "yarn");
  const std::string msg = error_of([&] { load_model_config((dir / "child.toml").string(), {"model.dimm=3"}); });
  EXPECT_NE(msg.find("did you mean model.dim"), std::string::npos) << msg;
  const std::string missing = error_of([&] { load_model_config((dir / "nope.toml").string()); });
  EXPECT_NE(missing.find("nope.toml"), std::string::npos) << missing;
  std::filesystem::remove_all(dir);
}

TEST(ModelConfig, DerivedValuesFollowThePredecessorRules) {
  ModelConfig c;
  c.dim = 768;
  c.mlp_ratio = 4.0;
  c.mlp_multiple_of = 128;
  EXPECT_EQ(c.resolved_mlp_hidden(), 2048);  // 768 * 4 * 2/3 = 2048
  c.mlp = "gelu";
  EXPECT_EQ(c.resolved_mlp_hidden(), 3072);
  c.dim = 700;
  c.mlp = "swiglu";
  EXPECT_EQ(c.resolved_mlp_hidden(), 1920);  // 1866.7 rounded up to 128
  c.depth = 6;
  c.sliding_window = 128;
  c.global_layer_every = 3;
  EXPECT_EQ(c.layer_windows(), (std::vector<int>{128, 128, 0, 128, 128, 0}));
  c.global_layer_every = 0;
  EXPECT_EQ(c.layer_windows(), (std::vector<int>{128, 128, 128, 128, 128, 0}));  // last is global
  c.window_pattern = {32, 0};
  EXPECT_EQ(c.layer_windows(), (std::vector<int>{32, 0, 32, 0, 32, 0}));
}

TEST(ModelConfig, DumpRoundTrips) {
  ModelConfig c;
  c.dim = 320;
  c.heads = 5;
  c.kv_heads = 1;
  c.window_pattern = {16, 0};
  c.rope_scaling = "ntk";
  const ModelConfig back = model_config_from_toml_string(model_config_to_toml(c));
  EXPECT_EQ(model_config_to_toml(back), model_config_to_toml(c));
  EXPECT_EQ(back.window_pattern, c.window_pattern);
}

}  // namespace
}  // namespace amber
