// Checkpoints: a directory per step holding model.safetensors (whole-model
// parameter names), optimizer.safetensors (state tensors named after their
// parameter) and trainer_state.json. A checkpoint is written under a temporary
// name and renamed when complete, and `latest` is replaced atomically afterwards, so
// an interrupted write never damages the checkpoint a resume would load.
// trainer_state.json records each tensor file's checksum; a load verifies them (a
// checkpoint from before checksums loads unchecked) and refuses non-finite values.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "amber/model/language_model.h"
#include "amber/train/optimizer.h"

namespace amber {

// Writes <out_dir>/checkpoints/step-NNNNNNNN, points `latest` at it and keeps the
// newest `keep_last` checkpoints. Returns the checkpoint's path. The checkpoint carries
// what using it needs: the model config in model.safetensors' metadata
// ("amber.model_config", TOML) and, given its path, a copy of the tokenizer
// (tokenizer.json), so that it works from any directory.
std::string save_checkpoint(const std::string& out_dir, int64_t step, const LanguageModel& model,
                            Optimizer& optimizer, const nlohmann::json& trainer_state, int keep_last,
                            const std::string& tokenizer = "");

// A weights-only checkpoint for release in `dir` (which must not exist, or be empty):
// model.safetensors with every parameter in `dtype` (f32, exact; or bf16, half the
// size) and the model's buffers (balance biases) in f32, a copy of the tokenizer, and
// a trainer_state.json holding the run config and step of `trainer_state` with
// "weights_only": true. amber sample, eval and export read it as they read any
// checkpoint; a resume refuses it (it holds no optimizer state or data position).
void save_weights_checkpoint(const std::string& dir, const LanguageModel& model, const nlohmann::json& trainer_state,
                             DType dtype, const std::string& tokenizer);

// The checkpoint `latest` names under <out_dir>/checkpoints, or "" when there is none.
std::string latest_checkpoint(const std::string& out_dir);

// The completed step-N folders under <out_dir>/checkpoints, oldest first.
std::vector<std::string> checkpoint_dirs(const std::string& out_dir);

// <dir>/trainer_state.json, parsed and checked to be an object of this amber's format
// version; an Error names the file and what is wrong.
nlohmann::json read_trainer_state(const std::string& dir);

// The integer `key` of a trainer state read from <dir>: an Error names the file and the
// key when it is missing (and no fallback is given) or not an integer.
int64_t trainer_state_integer(const nlohmann::json& state, const std::string& key, const std::string& dir,
                              std::optional<int64_t> missing = std::nullopt);

// Loads weights (and optimizer state when `optimizer` is given) into an already
// built model; every missing, extra, mis-shaped or non-finite tensor and every file
// that fails its checksum is an error naming it.
// Returns trainer_state.json.
nlohmann::json load_checkpoint(const std::string& dir, LanguageModel& model, Optimizer* optimizer);

}  // namespace amber
