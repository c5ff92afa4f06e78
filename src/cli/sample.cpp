// `amber sample`: loads a checkpoint and continues prompts with the KV-cache sampler.
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "amber/data/prompts.h"
#include "amber/data/tokenizer_json.h"
#include "amber/gen/generate.h"
#include "amber/train/checkpoint.h"
#include "amber/train/run_config.h"
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
  std::string dir = a.checkpoint;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "trainer_state.json")) {
    const std::string latest = latest_checkpoint(dir);
    AMBER_CHECK(!latest.empty(), dir, " is neither a checkpoint nor a run folder with checkpoints/latest");
    dir = latest;
  }
  const nlohmann::json state = read_trainer_state(dir);
  AMBER_CHECK(state.contains("config") && state.at("config").is_string(), dir,
              "/trainer_state.json: key \"config\" is missing or not a string; it was not written by amber train");
  const RunConfig config = run_config_from_toml(state.at("config").get<std::string>(), dir + "/trainer_state.json");
  // The checkpoint's own copy first: the run config's path may be relative to where
  // the run was started.
  const std::string own = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string tokenizer_path =
      !a.tokenizer.empty() ? a.tokenizer : std::filesystem::exists(own) ? own : config.data.tokenizer;
  AMBER_CHECK(!tokenizer_path.empty(), "no tokenizer: pass --tokenizer (the checkpoint holds none and the run config "
                                       "names none)");
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
