#include "amber/train/checkpointer.h"

#include "amber/train/checkpoint.h"

namespace amber {

Checkpointer::Checkpointer(const RunConfig& config, bool resume, const std::string& resume_from, RunRole role)
    : config_(config), role_(role), resume_dir_(resume_from) {
  const std::string& out_dir = config.train.out_dir;
  if (resume_dir_.empty() && resume) resume_dir_ = latest_checkpoint(out_dir);
  AMBER_CHECK(!resume_dir_.empty() || latest_checkpoint(out_dir).empty(), out_dir,
              " already holds checkpoints of an earlier run; continue it with --resume, or choose another "
              "train.out_dir (or remove the folder) to start afresh");
}

RunProgress Checkpointer::restore(LanguageModel& model, Optimizer& optimizer, data::Loader& loader) const {
  const nlohmann::json state = load_checkpoint(resume_dir_, model, &optimizer);
  loader.restore(state.at("loader"));
  return {state.at("step").get<int64_t>(), state.at("tokens_seen").get<int64_t>(),
          state.value("skipped_steps", int64_t{0})};
}

std::optional<std::string> Checkpointer::save(const RunProgress& progress, const LanguageModel& model,
                                              Optimizer& optimizer, const data::Loader& loader) const {
  if (!role_.writes_checkpoints()) return std::nullopt;
  const nlohmann::json state = {{"tokens_seen", progress.tokens_seen},
                                {"skipped_steps", progress.skipped_steps},
                                {"loader", loader.state_json()},
                                {"config", run_config_to_toml(config_)}};
  return save_checkpoint(config_.train.out_dir, progress.step, model, optimizer, state,
                         config_.train.keep_checkpoints);
}

}  // namespace amber
