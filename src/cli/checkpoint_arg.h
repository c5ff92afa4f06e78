// A checkpoint named on the command line (`--checkpoint`): a step folder, or a run
// folder standing for its latest checkpoint, with the run config it was trained with
// and the tokenizer that reads its ids (the checkpoint's own copy first, so that a
// copied run folder works from any directory).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "amber/train/run_config.h"

namespace amber::cli {

struct OpenedCheckpoint {
  std::string dir;
  nlohmann::json state;  // trainer_state.json
  RunConfig config;
  std::string tokenizer_path;
};

// `tokenizer` overrides the checkpoint's tokenizer when not empty.
OpenedCheckpoint open_checkpoint(const std::string& run_or_step, const std::string& tokenizer);

}  // namespace amber::cli
