// `amber eval`: a checkpoint's held-out loss on its run's evaluation set, the number
// the run logs as val_loss, and optionally that set's batches as JSON, so that another
// framework can score the same tokens (tests/export checks transformers against it).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "amber/train/checkpoint.h"
#include "amber/train/evaluator.h"
#include "amber/train/run_data.h"
#include "cli/checkpoint_arg.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string data_dir;
  std::string batches_out;
  std::string device;
};

// Each batch's tokens, targets (kNoTarget = -100 where none), document boundaries and
// positions, as lists of integers.
nlohmann::json batches_json(const std::vector<data::Batch>& batches) {
  nlohmann::json out = nlohmann::json::array();
  const auto ints = [](const Tensor& t) {
    const Tensor host = t.to(Device::cpu()).contiguous();
    const int32_t* p = host.data<int32_t>();
    return std::vector<int32_t>(p, p + host.numel());
  };
  for (const data::Batch& b : batches)
    out.push_back({{"tokens", ints(b.tokens)},
                   {"targets", ints(b.targets)},
                   {"cu_seqlens", b.seq.cu_seqlens_host},
                   {"positions", ints(b.seq.positions)}});
  return out;
}

void run_eval(const EvalArgs& a) {
  OpenedCheckpoint opened = open_checkpoint(a.checkpoint, "");
  RunConfig& config = opened.config;
  config.data.tokenizer = opened.tokenizer_path;
  if (!a.data_dir.empty()) config.data.dir = a.data_dir;
  std::ostringstream notes;  // the data notices a run prints; evaluation repeats none
  const RunData data(config, notes);
  AMBER_CHECK(!data.eval_batches.empty(), config.data.dir,
              " has no validation shards; make them with amber tokenize --val-fraction");
  // As the run evaluated: its compute dtype, on its device unless told otherwise.
  const Device device = device_from_name(a.device.empty() ? config.train.device : a.device);
  LanguageModel model(config.model, DType::f32, device, dtype_from_name(config.train.compute_dtype));
  load_checkpoint(opened.dir, model, nullptr);
  const EvalResult r = Evaluator(config, data).evaluate(model);
  std::cout << std::setprecision(9) << "checkpoint " << opened.dir << " (step "
            << trainer_state_integer(opened.state, "step", opened.dir, 0) << ") on " << device << " in "
            << config.train.compute_dtype << "\nval_loss " << r.loss << " over "
            << r.tokens << " tokens (unigram baseline " << r.unigram << ")\nperplexity " << std::exp(r.loss) << "\n";
  if (a.batches_out.empty()) return;
  const std::string temporary = a.batches_out + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    AMBER_CHECK(out, "cannot write ", temporary, ": check the directory exists and is writable");
    out << batches_json(data.eval_batches).dump() << "\n";
    out.flush();
    AMBER_CHECK(out, "writing ", temporary, " failed (disk full?)");
  }
  std::filesystem::rename(temporary, a.batches_out);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval",
                                 "Held-out loss and perplexity of a checkpoint on its run's evaluation set, computed "
                                 "as the run computed its val_loss (its compute dtype, its device)");
  cmd->add_option("--checkpoint", a->checkpoint, "Checkpoint directory, or a run folder (uses its latest)")
      ->required();
  cmd->add_option("--data,--data-dir", a->data_dir, "Shards folder (default: the run config's data.dir)");
  cmd->add_option("--device", a->device, "auto, cpu, cuda or cuda:N (default: the run config's train.device)");
  cmd->add_option("--batches-out", a->batches_out,
                  "Also write the evaluation batches (tokens, targets, cu_seqlens, positions) to this JSON file");
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace amber::cli
