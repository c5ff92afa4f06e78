// `amber export hf`: a checkpoint as a Hugging Face model folder that stock
// transformers loads (export/hf_folder.h); docs/interop.md says what maps to what.
#include <iostream>

#include "amber/data/prompts.h"
#include "amber/data/tokenizer_json.h"
#include "amber/export/hf_folder.h"
#include "amber/train/checkpoint.h"
#include "cli/checkpoint_arg.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string out;
  std::string dtype = "f32";
  std::string tokenizer;
  int64_t shard_mb = 5120;
};

void run_export_hf(const ExportArgs& a) {
  const OpenedCheckpoint opened = open_checkpoint(a.checkpoint, a.tokenizer);
  const RunConfig& config = opened.config;
  // Refused before the weights are read: a model no stock class computes.
  hf_architecture(config.model);
  const data::Tokenizer tokenizer = data::load_tokenizer_json(opened.tokenizer_path);
  AMBER_CHECK(tokenizer.vocab_size() <= config.model.vocab_size, opened.tokenizer_path, " has ",
              tokenizer.vocab_size(), " tokens but the checkpoint's model.vocab_size is ", config.model.vocab_size,
              "; pass the tokenizer the run was trained with (--tokenizer)");
  HfTokenizerFiles files{opened.tokenizer_path, config.data.bos, config.data.eos, {}};
  files.ids.bos = data::special_token_id(&tokenizer, opened.tokenizer_path, config.data.bos, "bos");
  files.ids.eos = data::special_token_id(&tokenizer, opened.tokenizer_path, config.data.eos, "eos");
  LanguageModel model(config.model);
  load_checkpoint(opened.dir, model, nullptr);
  const HfExportOptions options{a.dtype == "bf16" ? DType::bf16 : DType::f32, a.shard_mb << 20};
  write_hf_folder(model, files, a.out, options);
  std::cout << "exported " << opened.dir << " as " << hf_model_type(hf_architecture(config.model)) << " ("
            << a.dtype << ") to " << a.out << "\n";
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint in another framework's format (docs/interop.md)");
  cmd->require_subcommand(1);
  auto a = std::make_shared<ExportArgs>();
  auto* hf = cmd->add_subcommand("hf", "A Hugging Face folder (Llama, Qwen3 or Gemma3 layout) that transformers loads");
  hf->add_option("--checkpoint", a->checkpoint, "Checkpoint directory, or a run folder (uses its latest)")
      ->required();
  hf->add_option("--out", a->out, "Folder to write (must not exist or be empty)")->required();
  hf->add_option("--dtype", a->dtype, "Stored weights: f32 (exact) or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  hf->add_option("--shard-mb", a->shard_mb,
                 "Weights above this many MiB go to several files with model.safetensors.index.json")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  hf->add_option("--tokenizer", a->tokenizer,
                 "tokenizer.json (default: the checkpoint's copy, else the path the run config names)");
  hf->callback([a] { run_export_hf(*a); });
}

}  // namespace amber::cli
