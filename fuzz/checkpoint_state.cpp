// Fuzz target: the checkpoint state reader. A real checkpoint of a very small model is
// written once; each input replaces its trainer_state.json and the checkpoint is
// loaded with its optimizer state, so format version, checksums and step counts are all read.
// With AMBER_FUZZ_SEED_OUT set, the fixture's own trainer_state.json is copied there
// (how fuzz/corpus/checkpoint_state/valid.json was made).
#include <cstdlib>

#include "amber/train/checkpoint.h"
#include "fuzz/fuzz_input.h"

namespace {

struct Fixture {
  amber::LanguageModel model{amber::ModelConfig{
      .vocab_size = 16, .dim = 8, .depth = 1, .heads = 2, .kv_heads = 1, .mlp_hidden = 16, .window_pattern = {}}};
  std::unique_ptr<amber::Optimizer> optimizer = amber::build_optimizer({}, model.store());
  std::string dir = amber::save_checkpoint((amber::fuzz::scratch_dir() / "run").string(), 1, model, *optimizer,
                                           {{"tokens_seen", 0}}, 1);
  Fixture() {
    if (const char* seed = std::getenv("AMBER_FUZZ_SEED_OUT"))
      std::filesystem::copy_file(dir + "/trainer_state.json", seed, std::filesystem::copy_options::overwrite_existing);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  const std::string state = fixture.dir + "/trainer_state.json";
  ::unlink(state.c_str());  // a new file, not a truncated one (fuzz_input.h says why)
  std::ofstream(state, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    amber::load_checkpoint(fixture.dir, fixture.model, fixture.optimizer.get());
  } catch (const amber::Error&) {
  }
  return 0;
}
