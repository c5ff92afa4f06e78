// Checkpointer: where a run starts and what it leaves to resume from. It picks the
// checkpoint a run resumes from (--resume: <out_dir>/checkpoints/latest, or where that is
// missing or unreadable the newest step-N folder that loads; --resume-from: a given one)
// and refuses to start afresh over an earlier run's checkpoints; it
// restores the model, optimizer, loader and progress from that checkpoint, and writes
// new ones (checkpoint.h: atomic, keeping the newest train.keep_checkpoints) on the
// process whose RunRole writes them.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

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

  // Whether the run resumes from a checkpoint (false: a fresh run).
  bool resumes() const { return !candidates_.empty(); }
  // Loads the checkpoint the run resumes from into the model, the optimizer and the
  // loader; says on `console` which one when `latest` could not name it.
  RunProgress restore(LanguageModel& model, Optimizer& optimizer, data::Loader& loader, std::ostream& console);
  // The checkpoint restore() loaded.
  const std::string& resume_dir() const { return resume_dir_; }
  // Writes the checkpoint of `progress.step`; returns its path, or nothing on a process
  // that does not write checkpoints. Every rank calls it: a sharded optimizer's state is
  // gathered from all of them.
  std::optional<std::string> save(const RunProgress& progress, const LanguageModel& model, Optimizer& optimizer,
                                  const data::Loader& loader) const;

 private:
  const RunConfig& config_;
  RunRole role_;
  std::vector<std::string> candidates_;  // to resume from, the first that loads
  std::string fallback_reason_;          // why `latest` named none of them, or ""
  std::string resume_dir_;
};

}  // namespace amber
