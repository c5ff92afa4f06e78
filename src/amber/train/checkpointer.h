// Checkpointer: where a run starts and what it leaves to resume from. It picks the
// checkpoint a run resumes from (--resume: <out_dir>/checkpoints/latest; --resume-from:
// a given one) and refuses to start afresh over an earlier run's checkpoints; it
// restores the model, optimizer, loader and progress from that checkpoint, and writes
// new ones (checkpoint.h: atomic, keeping the newest train.keep_checkpoints) on the
// process whose RunRole writes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "amber/data/loader.h"
#include "amber/model/language_model.h"
#include "amber/train/optimizer.h"
#include "amber/train/run_config.h"
#include "amber/train/run_role.h"

namespace amber {

// How far a run has come: what a checkpoint stores beside the weights and the loader.
struct RunProgress {
  int64_t step = 0, tokens_seen = 0, skipped_steps = 0;
};

class Checkpointer {
 public:
  // resume: continue from <out_dir>/checkpoints/latest when present; resume_from: or
  // from this checkpoint directory ("" for none).
  Checkpointer(const RunConfig& config, bool resume, const std::string& resume_from, RunRole role);

  // The checkpoint the run resumes from, or "" for a fresh run.
  const std::string& resume_dir() const { return resume_dir_; }
  // Loads resume_dir() into the model, the optimizer and the loader.
  RunProgress restore(LanguageModel& model, Optimizer& optimizer, data::Loader& loader) const;
  // Writes the checkpoint of `progress.step`; returns its path, or nothing on a process
  // that does not write checkpoints.
  std::optional<std::string> save(const RunProgress& progress, const LanguageModel& model, Optimizer& optimizer,
                                  const data::Loader& loader) const;

 private:
  const RunConfig& config_;
  RunRole role_;
  std::string resume_dir_;
};

}  // namespace amber
