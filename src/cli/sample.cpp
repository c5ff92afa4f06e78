// `amber sample`: loads a checkpoint and continues prompts with the KV-cache sampler.
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "amber/data/prompts.h"
#include "amber/data/tokenizer_json.h"
#include "amber/gen/generate.h"
#include "amber/train/checkpoint.h"
#include "cli/checkpoint_arg.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct SampleArgs {
  std::string checkpoint;
  std::string tokenizer;
  std::vector<std::string> prompts;
  GenerationConfig generation;
  bool raw_bos = false;
};

void run_sample(const SampleArgs& a) {
  const OpenedCheckpoint opened = open_checkpoint(a.checkpoint, a.tokenizer);
  const std::string &dir = opened.dir, &tokenizer_path = opened.tokenizer_path;
  const nlohmann::json& state = opened.state;
  const RunConfig& config = opened.config;
  const data::Tokenizer tokenizer = data::load_tokenizer_json(tokenizer_path);
  AMBER_CHECK(tokenizer.vocab_size() <= config.model.vocab_size, tokenizer_path, " has ", tokenizer.vocab_size(),
              " tokens but the checkpoint's model.vocab_size is ", config.model.vocab_size,
              "; pass the tokenizer the run was trained with (--tokenizer)");
  LanguageModel model(config.model);
  load_checkpoint(dir, model, nullptr);
  // The run's bos and eos, which another tokenizer (--tokenizer) must also know.
  const std::optional<int32_t> bos = data::special_token_id(&tokenizer, tokenizer_path, config.data.bos, "bos");
  const std::optional<int32_t> eos = data::special_token_id(&tokenizer, tokenizer_path, config.data.eos, "eos");
  std::vector<std::string> texts = a.prompts.empty() ? std::vector<std::string>{""} : a.prompts;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : texts) prompts.push_back(data::prompt_ids(tokenizer, bos, text, "--prompt"));
  GenerationConfig g = a.generation;
  g.eos_id = eos.value_or(-1);
  g.vocab_limit = tokenizer.vocab_size();  // a padded vocabulary's extra ids have no text
  const auto out = generate(model, prompts, g);
  std::cout << "checkpoint " << dir << " (step " << trainer_state_integer(state, "step", dir, 0) << ")\n";
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<int32_t> ids = out[i];
    if (!ids.empty() && eos && ids.back() == *eos) ids.pop_back();
    std::cout << "--- sample " << i + 1 << "\n" << texts[i] << tokenizer.decode(ids) << "\n";
  }
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint (several prompts run as one batch)");
  cmd->add_option("--checkpoint", a->checkpoint, "Checkpoint directory, or a run folder (uses its latest)")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json (default: the checkpoint's copy, else the path the run config names)");
  cmd->add_option("--prompt", a->prompts, "Prompt text (repeatable; default: one empty prompt after bos)");
  cmd->add_option("--max-tokens", a->generation.max_new_tokens, "New tokens per prompt")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));  // the KV cache is sized by it: a huge value is a huge allocation
  cmd->add_option("--temperature", a->generation.sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", a->generation.sampling.top_k, "Keep the k most likely tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--top-p", a->generation.sampling.top_p, "Nucleus: keep the smallest set with this mass")
      ->capture_default_str();
  cmd->add_option("--min-p", a->generation.sampling.min_p, "Keep tokens with p >= min_p * p_max (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", a->generation.sampling.seed, "Sampling seed")->capture_default_str();
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace amber::cli
