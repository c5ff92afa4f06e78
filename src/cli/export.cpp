// `amber export hf|gguf|weights`: a checkpoint as a Hugging Face model folder that
// stock transformers loads (export/hf_folder.h), as a GGUF file llama.cpp runs
// (export/gguf_export.h), or as a weights-only amber checkpoint for release
// (train/checkpoint.h); docs/interop.md says what maps to what.
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>

#include "amber/data/prompts.h"
#include "amber/data/tokenizer_json.h"
#include "amber/export/gguf_export.h"
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

// The checkpoint's model, loaded, with its tokenizer file and the run's special tokens.
struct Exported {
  std::unique_ptr<LanguageModel> model;
  HfTokenizerFiles tokenizer;
  std::string dir;
};

// `check` refuses what the format cannot hold before the weights are read.
Exported open_export(const ExportArgs& a, const std::function<void(const ModelConfig&)>& check) {
  const OpenedCheckpoint opened = open_checkpoint(a.checkpoint, a.tokenizer);
  const RunConfig& config = opened.config;
  check(config.model);
  const data::Tokenizer tokenizer = data::load_tokenizer_json(opened.tokenizer_path);
  AMBER_CHECK(tokenizer.vocab_size() <= config.model.vocab_size, opened.tokenizer_path, " has ",
              tokenizer.vocab_size(), " tokens but the checkpoint's model.vocab_size is ", config.model.vocab_size,
              "; pass the tokenizer the run was trained with (--tokenizer)");
  Exported e{std::make_unique<LanguageModel>(config.model),
             {opened.tokenizer_path, config.data.bos, config.data.eos, {}},
             opened.dir};
  e.tokenizer.ids.bos = data::special_token_id(&tokenizer, opened.tokenizer_path, config.data.bos, "bos");
  e.tokenizer.ids.eos = data::special_token_id(&tokenizer, opened.tokenizer_path, config.data.eos, "eos");
  load_checkpoint(opened.dir, *e.model, nullptr);
  return e;
}

void run_export_hf(const ExportArgs& a) {
  const Exported e = open_export(a, [](const ModelConfig& c) { hf_architecture(c); });
  const HfExportOptions options{a.dtype == "bf16" ? DType::bf16 : DType::f32, a.shard_mb << 20};
  write_hf_folder(*e.model, e.tokenizer, a.out, options);
  std::cout << "exported " << e.dir << " as " << hf_model_type(hf_architecture(e.model->config())) << " (" << a.dtype
            << ") to " << a.out << "\n";
}

void run_export_weights(const ExportArgs& a) {
  const OpenedCheckpoint opened = open_checkpoint(a.checkpoint, a.tokenizer);
  LanguageModel model(opened.config.model);
  load_checkpoint(opened.dir, model, nullptr);
  save_weights_checkpoint(a.out, model, opened.state, dtype_from_name(a.dtype), opened.tokenizer_path);
  std::cout << "exported the weights of " << opened.dir << " (" << a.dtype << ") to " << a.out
            << ": amber sample, eval and export read it; it cannot resume training\n";
}

void run_export_gguf(const ExportArgs& a) {
  const Exported e = open_export(a, [](const ModelConfig& c) { gguf_architecture(c); });
  AMBER_CHECK(!std::filesystem::exists(a.out), a.out, " already exists; choose another --out or remove it");
  write_gguf(*e.model, e.tokenizer, a.out, dtype_from_name(a.dtype));
  std::cout << "exported " << e.dir << " as GGUF " << gguf_architecture(e.model->config()) << " (" << a.dtype
            << ") to " << a.out << "\n";
}

// The options every export takes: the checkpoint, where to write, the tokenizer.
void add_common_options(CLI::App* sub, ExportArgs& a, const std::string& out_help) {
  sub->add_option("--checkpoint", a.checkpoint, "Checkpoint directory, or a run folder (uses its latest)")->required();
  sub->add_option("--out", a.out, out_help)->required();
  sub->add_option("--tokenizer", a.tokenizer,
                  "tokenizer.json (default: the checkpoint's copy, else the path the run config names)");
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export", "Write a checkpoint in another framework's format, or as weights only (docs/interop.md)");
  cmd->require_subcommand(1);
  auto a = std::make_shared<ExportArgs>();
  auto* hf = cmd->add_subcommand("hf", "A Hugging Face folder (Llama, Qwen3 or Gemma3 layout) that transformers loads");
  add_common_options(hf, *a, "Folder to write (must not exist or be empty)");
  hf->add_option("--dtype", a->dtype, "Stored weights: f32 (exact) or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  hf->add_option("--shard-mb", a->shard_mb,
                 "Weights above this many MiB go to several files with model.safetensors.index.json")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  hf->callback([a] { run_export_hf(*a); });

  auto w = std::make_shared<ExportArgs>();
  w->dtype = "bf16";
  auto* weights = cmd->add_subcommand(
      "weights", "A weights-only amber checkpoint for release: the weights (bf16 by default), tokenizer and run "
                 "config, without the optimizer state; amber sample, eval and export read it");
  add_common_options(weights, *w, "Folder to write (must not exist or be empty)");
  weights->add_option("--dtype", w->dtype, "Stored weights: bf16 (half the size) or f32 (exact)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  weights->callback([w] { run_export_weights(*w); });

  auto g = std::make_shared<ExportArgs>();
  auto* gguf = cmd->add_subcommand("gguf", "A GGUF file (llama.cpp's llama or qwen3 architecture) with the tokenizer");
  add_common_options(gguf, *g, "File to write (must not exist)");
  gguf->add_option("--dtype", g->dtype, "Stored matrices: f32 (exact), f16 or bf16 (vectors stay f32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  gguf->callback([g] { run_export_gguf(*g); });
}

}  // namespace amber::cli
