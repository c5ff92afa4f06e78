// Checkpoints carry their integrity: trainer_state.json records a checksum per tensor
// file, a load checks it and refuses non-finite weights, naming the file or tensor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "amber/train/checkpoint.h"
#include "tiny_model.h"

namespace amber {
namespace {
namespace fs = std::filesystem;

struct Saved {
  std::string out, dir;
  LanguageModel model{testing::tiny_model()};
  std::unique_ptr<Optimizer> opt = build_optimizer({}, model.store());
  explicit Saved(const std::string& name)
      : out((fs::temp_directory_path() / ("amber_integrity_" + name + "_" + std::to_string(::getpid()))).string()) {
    fs::remove_all(out);
  }
  void save() { dir = save_checkpoint(out, 1, model, *opt, {{"tokens_seen", 0}}, 1); }
  ~Saved() { fs::remove_all(out); }
};

// Flips one bit of the byte `from_end` bytes before the end of `path` (in the data
// section, where the last tensor's values are).
void flip_bit(const std::string& path, int from_end, unsigned char mask) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(static_cast<char>(c ^ mask));
}

std::string load_error(const std::string& dir, LanguageModel& model, Optimizer* opt) {
  try {
    load_checkpoint(dir, model, opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointIntegrity, EveryTensorFilesChecksumIsRecordedInTheState) {
  Saved s("recorded");
  s.save();
  const nlohmann::json state = nlohmann::json::parse(std::ifstream(s.dir + "/trainer_state.json"));
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    ASSERT_TRUE(state.contains("checksums") && state["checksums"].contains(file)) << state.dump();
    EXPECT_EQ(state["checksums"][file].get<std::string>().rfind("xxh64:", 0), 0u);
  }
  EXPECT_EQ(load_error(s.dir, s.model, s.opt.get()), "");
}

TEST(CheckpointIntegrity, AFlippedBitInATensorFileFailsTheLoadNamingTheFile) {
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    Saved s(std::string("flip_") + file);
    s.save();
    flip_bit(s.dir + "/" + file, 4, 0x01);  // a mantissa bit: the value stays finite
    const std::string error = load_error(s.dir, s.model, s.opt.get());
    EXPECT_NE(error.find(s.dir + "/" + file), std::string::npos) << error;
    EXPECT_NE(error.find("checksum"), std::string::npos) << error;
  }
}

TEST(CheckpointIntegrity, ACheckpointWithoutChecksumsLoadsUnchecked) {
  Saved s("legacy");
  s.save();
  nlohmann::json state = nlohmann::json::parse(std::ifstream(s.dir + "/trainer_state.json"));
  state.erase("checksums");
  std::ofstream(s.dir + "/trainer_state.json", std::ios::trunc) << state.dump(2);
  flip_bit(s.dir + "/model.safetensors", 4, 0x01);
  EXPECT_EQ(load_error(s.dir, s.model, s.opt.get()), "");
}

TEST(CheckpointIntegrity, NonFiniteWeightsStopTheLoadNamingTheTensor) {
  for (const float bad : {NAN, INFINITY}) {
    Saved s("nonfinite");
    const auto& p = s.model.params()[1];
    static_cast<float*>(p->value.raw())[3] = bad;
    s.save();
    LanguageModel fresh(testing::tiny_model());
    const std::string error = load_error(s.dir, fresh, nullptr);
    EXPECT_NE(error.find("'" + p->name + "'"), std::string::npos) << error;
    EXPECT_NE(error.find("non-finite"), std::string::npos) << error;
    EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace amber
