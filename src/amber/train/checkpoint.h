// Checkpoints: a directory per step holding model.safetensors (whole-model
// parameter names), optimizer.safetensors (state tensors named after their
// parameter) and trainer_state.json. A checkpoint is written under a temporary
// name and renamed when complete, and `latest` is replaced atomically afterwards, so
// an interrupted write never damages the checkpoint a resume would load.
// trainer_state.json records each tensor file's checksum; a load verifies them (a
// checkpoint from before checksums loads unchecked) and refuses non-finite values.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "amber/model/language_model.h"
#include "amber/train/optimizer.h"

namespace amber {

// Writes <out_dir>/checkpoints/step-NNNNNNNN, points `latest` at it and keeps the
// newest `keep_last` checkpoints. Returns the checkpoint's path.
std::string save_checkpoint(const std::string& out_dir, int64_t step, const LanguageModel& model,
                            Optimizer& optimizer, const nlohmann::json& trainer_state, int keep_last);

// The checkpoint `latest` names under <out_dir>/checkpoints, or "" when there is none.
std::string latest_checkpoint(const std::string& out_dir);

// Loads weights (and optimizer state when `optimizer` is given) into an already
// built model; every missing, extra, mis-shaped or non-finite tensor and every file
// that fails its checksum is an error naming it.
// Returns trainer_state.json.
nlohmann::json load_checkpoint(const std::string& dir, LanguageModel& model, Optimizer* optimizer);

}  // namespace amber
