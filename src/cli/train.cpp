// `amber train`: runs (or resumes) a training run described by a TOML config.
#include <iostream>

#include "amber/train/trainer.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = false;
  std::string resume_from;
  std::string init_from;
  bool quiet = false;
};

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML run config ([model], [train], [optimizer], "
                                          "[schedule], [data]; see docs/config.md)");
  cmd->add_option("config", args->config, "Run config (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "Override a config value: --set train.steps=200 (repeatable)");
  cmd->add_flag("--resume", args->resume, "Continue from <train.out_dir>/checkpoints/latest if it exists");
  cmd->add_option("--resume-from", args->resume_from, "Continue from this checkpoint directory")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--init-from", args->init_from,
                  "Start from the weights of this Hugging Face folder (Llama or Qwen3 layout, safetensors; its "
                  "config.json must match [model])")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--quiet", args->quiet, "No progress line (metrics still go to metrics.jsonl)");
  cmd->callback([args] {
    RunConfig config = load_run_config(args->config, args->overrides);
    Trainer trainer(std::move(config), {args->resume, args->resume_from, !args->quiet, args->init_from});
    trainer.run();
    // Stopped by a signal, with a checkpoint: exit as the signal would have (128 + its
    // number), so that a script or scheduler sees the run did not finish.
    if (const int signal = trainer.stopped_by()) throw CLI::RuntimeError(128 + signal);
  });
}

}  // namespace amber::cli
