// A checkpoint written by an earlier amber (tests/train/fixtures/checkpoint-fcdc7fd)
// loads into this build and its run continues as that build's did: the same losses
// and final weights up to rounding on the CPU. Bit for bit until 2026-12-06, when the
// CPU attention, cross-entropy and SiLU moved into vector lanes (an exp of their own,
// sums in lanes) and the GEMMs into larger calls, which round differently; a resume
// within one build stays bit-exact (Trainer's resume tests).
#include <gtest/gtest.h>

#include "amber/io/safetensors.h"
#include "amber/train/trainer.h"
#include "train/run_testing.h"

namespace amber {
namespace {

using namespace run_testing;

const fs::path kFixture = fs::path(AMBER_SOURCE_DIR) / "tests/train/fixtures/checkpoint-fcdc7fd";

std::vector<double> losses_of(const std::vector<nlohmann::json>& records) {
  std::vector<double> out;
  for (const nlohmann::json& r : records) out.push_back(r["loss"].get<double>());
  return out;
}

TEST(CheckpointCompat, APreviousBuildsCheckpointResumesAndTracksItsRun) {
  const std::string corpus = write_corpus("compat");
  const std::string out = corpus + "_run";
  fs::remove_all(out);
  // The fixture's run: small_run with the model narrowed (its README).
  RunConfig c = small_run(corpus, out);
  c.model.dim = 16;
  c.model.heads = 2;
  c.model.kv_heads = 1;
  c.model.mlp_hidden = 32;
  c.validate();
  Trainer(c, {false, kFixture.string(), false}).run();

  const std::vector<double> before = losses_of(train_records(kFixture.string()));
  const std::vector<double> after = losses_of(train_records(out));
  ASSERT_EQ(before.size(), 6u);
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(after[i], before[3 + i], 1e-5 * before[3 + i]) << "step " << 4 + i;

  const SafetensorsFile expected = load_safetensors((kFixture / "model-step-6.safetensors").string());
  const SafetensorsFile resumed = load_safetensors(out + "/checkpoints/step-00000006/model.safetensors");
  ASSERT_EQ(resumed.tensors.size(), expected.tensors.size());
  for (const auto& [name, tensor] : expected.tensors) {
    const std::vector<double> want = tensor.to_doubles(), got = resumed.tensors.at(name).to_doubles();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "]";
  }
  fs::remove_all(out);
  fs::remove_all(corpus);
}

}  // namespace
}  // namespace amber
