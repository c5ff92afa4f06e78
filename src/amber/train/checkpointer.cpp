#include "amber/train/checkpointer.h"

#include <algorithm>
#include <filesystem>

#include "amber/train/checkpoint.h"

namespace amber {
namespace fs = std::filesystem;

namespace {

// The optimizer's whole state (Optimizer::open_whole_state) for as long as it lives.
class WholeState {
 public:
  WholeState(Optimizer& optimizer, bool gather) : optimizer_(optimizer) { optimizer_.open_whole_state(gather); }
  ~WholeState() { optimizer_.close_whole_state(loaded_); }
  WholeState(const WholeState&) = delete;
  WholeState& operator=(const WholeState&) = delete;
  void loaded() { loaded_ = true; }

 private:
  Optimizer& optimizer_;
  bool loaded_ = false;
};

}  // namespace

Checkpointer::Checkpointer(const RunConfig& config, bool resume, const std::string& resume_from, RunRole role)
    : config_(config), role_(role) {
  const std::string& out_dir = config.train.out_dir;
  if (!resume_from.empty()) {
    candidates_ = {resume_from};
    return;
  }
  const fs::path latest_file = fs::path(out_dir) / "checkpoints" / "latest";
  std::vector<std::string> steps = checkpoint_dirs(out_dir);
  AMBER_CHECK(resume || (steps.empty() && !fs::exists(latest_file)), out_dir,
              " already holds checkpoints of an earlier run; continue it with --resume, or choose another "
              "train.out_dir (or remove the folder) to start afresh");
  if (!resume) return;
  std::string latest;
  try {
    latest = latest_checkpoint(out_dir);
  } catch (const Error& e) {
    fallback_reason_ = e.what();
  }
  if (!latest.empty()) {
    candidates_ = {latest};
    return;
  }
  // `latest` is missing or unreadable: the step-N folders, newest first, rather than a
  // fresh run that would truncate metrics.jsonl and prune the earlier checkpoints.
  if (fallback_reason_.empty()) fallback_reason_ = latest_file.string() + " is missing";
  std::reverse(steps.begin(), steps.end());
  candidates_ = std::move(steps);
  AMBER_CHECK(!candidates_.empty() || !fs::exists(latest_file), fallback_reason_,
              ", and there is no step-N folder beside it to resume from; repair or remove it");
}

RunProgress Checkpointer::restore(LanguageModel& model, Optimizer& optimizer, data::Loader& loader,
                                  std::ostream& console) {
  std::string errors;
  for (const std::string& dir : candidates_) {
    try {
      WholeState whole(optimizer, false);
      const nlohmann::json state = load_checkpoint(dir, model, &optimizer);
      whole.loaded();
      AMBER_CHECK(state.contains("loader"), dir, "/trainer_state.json: key \"loader\" is missing; the checkpoint ",
                  "is damaged or not amber's");
      try {
        loader.restore(state.at("loader"));
      } catch (const Error& e) {
        fail(dir, "/trainer_state.json: ", e.what());
      }
      const RunProgress progress{trainer_state_integer(state, "step", dir),
                                 trainer_state_integer(state, "tokens_seen", dir),
                                 trainer_state_integer(state, "skipped_steps", dir, 0)};
      if (!fallback_reason_.empty())
        console << "note: " << fallback_reason_ << ", so the run resumes from the newest checkpoint that loads, "
                << dir << "\n";
      resume_dir_ = dir;
      return progress;
    } catch (const Error& e) {
      if (fallback_reason_.empty()) throw;  // the checkpoint asked for, by latest or --resume-from
      errors += concat("\n  ", dir, ": ", e.what());
    }
  }
  fail(fallback_reason_, " and no checkpoint under ", (fs::path(config_.train.out_dir) / "checkpoints").string(),
       " loads:", errors,
       "\nrepair one (and point checkpoints/latest at it), or start afresh in another train.out_dir");
}

std::optional<std::string> Checkpointer::save(const RunProgress& progress, const LanguageModel& model,
                                              Optimizer& optimizer, const data::Loader& loader) const {
  // Every rank takes part in gathering a sharded optimizer's state; one writes it.
  const WholeState whole(optimizer, true);
  if (!role_.writes_checkpoints()) return std::nullopt;
  const nlohmann::json state = {{"tokens_seen", progress.tokens_seen},
                                {"skipped_steps", progress.skipped_steps},
                                {"loader", loader.state_json()},
                                {"config", run_config_to_toml(config_)}};
  try {
    return save_checkpoint(config_.train.out_dir, progress.step, model, optimizer, state,
                           config_.train.keep_checkpoints, config_.data.tokenizer);
  } catch (const fs::filesystem_error& e) {
    fail("cannot write the checkpoint of step ", progress.step, " under ",
         (fs::path(config_.train.out_dir) / "checkpoints").string(), ": ", e.what(),
         "; the previous checkpoint is intact (free space or fix the folder, then --resume)");
  }
}

}  // namespace amber
