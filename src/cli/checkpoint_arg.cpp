#include "cli/checkpoint_arg.h"

#include <filesystem>

#include "amber/train/checkpoint.h"

namespace amber::cli {

OpenedCheckpoint open_checkpoint(const std::string& run_or_step, const std::string& tokenizer) {
  OpenedCheckpoint c;
  c.dir = run_or_step;
  if (!std::filesystem::exists(std::filesystem::path(c.dir) / "trainer_state.json")) {
    const std::string latest = latest_checkpoint(c.dir);
    AMBER_CHECK(!latest.empty(), c.dir, " is neither a checkpoint nor a run folder with checkpoints/latest");
    c.dir = latest;
  }
  c.state = read_trainer_state(c.dir);
  AMBER_CHECK(c.state.contains("config") && c.state.at("config").is_string(), c.dir,
              "/trainer_state.json: key \"config\" is missing or not a string; it was not written by amber train");
  c.config = run_config_from_toml(c.state.at("config").get<std::string>(), c.dir + "/trainer_state.json");
  // The checkpoint's own copy first: the run config's path may be relative to where
  // the run was started.
  const std::string own = (std::filesystem::path(c.dir) / "tokenizer.json").string();
  c.tokenizer_path = !tokenizer.empty() ? tokenizer : std::filesystem::exists(own) ? own : c.config.data.tokenizer;
  AMBER_CHECK(!c.tokenizer_path.empty(), "no tokenizer: pass --tokenizer (the checkpoint holds none and the run "
                                         "config names none)");
  return c;
}

}  // namespace amber::cli
