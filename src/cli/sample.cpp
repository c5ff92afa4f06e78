// `amber sample`: loads a checkpoint and continues prompts with the KV-cache sampler.
#include <iomanip>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "amber/data/prompts.h"
#include "amber/data/tokenizer_json.h"
#include "amber/gen/generate.h"
#include "amber/gen/text_stream.h"
#include "amber/train/checkpoint.h"
#include "bench/op_profile.h"
#include "cli/checkpoint_arg.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct SampleArgs {
  std::string checkpoint;
  std::string tokenizer;
  std::vector<std::string> prompts;
  std::vector<std::string> stops;
  std::string device = "auto";
  std::string dtype = "f32";
  bool no_graph = false;
  bool profile = false;
  GenerationConfig generation;
};

// Each sequence's text stream, fed the decode of its tokens after each one; the first
// sequence prints as it goes when it is the only one.
class SampleText {
 public:
  SampleText(const data::Tokenizer& tokenizer, int sequences, const std::vector<std::string>& stops,
             std::optional<int32_t> eos, bool stream)
      : tokenizer_(tokenizer), eos_(eos), stream_(stream), ids_(static_cast<size_t>(sequences)) {
    for (int s = 0; s < sequences; ++s) streams_.emplace_back(stops);
  }

  // GenerationConfig::on_token: false once the sequence's text reached a stop string.
  bool add(int sequence, int32_t token) {
    if (eos_ && token == *eos_) return true;  // eos ends the sequence itself and has no text
    std::vector<int32_t>& ids = ids_[static_cast<size_t>(sequence)];
    ids.push_back(token);
    TextStream& text = streams_[static_cast<size_t>(sequence)];
    const bool go_on = text.update(tokenizer_.decode(ids));
    if (stream_) std::cout << text.take() << std::flush;
    return go_on;
  }

  TextStream& stream(int sequence) { return streams_[static_cast<size_t>(sequence)]; }

 private:
  const data::Tokenizer& tokenizer_;
  std::optional<int32_t> eos_;
  bool stream_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<TextStream> streams_;
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
  const Device device = device_from_name(a.device);
  AMBER_CHECK(!a.profile || (device.is_cuda() && !a.no_graph), "--profile times the ops of the captured decode step: "
              "it needs a GPU (--device cuda) and the CUDA graph (drop --no-graph)");
  LanguageModel model(config.model, DType::f32, device, dtype_from_name(a.dtype));
  load_checkpoint(dir, model, nullptr);
  // The run's bos and eos, which another tokenizer (--tokenizer) must also know.
  const std::optional<int32_t> bos = data::special_token_id(&tokenizer, tokenizer_path, config.data.bos, "bos");
  const std::optional<int32_t> eos = data::special_token_id(&tokenizer, tokenizer_path, config.data.eos, "eos");
  std::vector<std::string> texts = a.prompts.empty() ? std::vector<std::string>{""} : a.prompts;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : texts) prompts.push_back(data::prompt_ids(tokenizer, bos, text, "--prompt"));
  const int sequences = static_cast<int>(prompts.size());
  const bool stream = sequences == 1;
  SampleText samples(tokenizer, sequences, a.stops, eos, stream);
  GenerationConfig g = a.generation;
  g.eos_id = eos.value_or(-1);
  g.vocab_limit = tokenizer.vocab_size();  // a padded vocabulary's extra ids have no text
  g.cuda_graph = !a.no_graph;
  g.on_token = [&samples](int sequence, int32_t token) { return samples.add(sequence, token); };
  std::cout << "checkpoint " << dir << " (step " << trainer_state_integer(state, "step", dir, 0) << ")\n";
  if (stream) std::cout << "--- sample 1\n" << texts[0] << std::flush;
  if (a.profile) profile::start();
  const Generation out = generate(model, prompts, g);
  const std::vector<std::pair<std::string, double>> op_ms = a.profile ? profile::report(1) : decltype(op_ms){};
  for (int s = 0; s < sequences; ++s) {
    if (!stream) std::cout << "--- sample " << s + 1 << "\n" << texts[static_cast<size_t>(s)];
    TextStream& text = samples.stream(s);
    std::cout << (stream ? text.take_rest() : text.text()) << "\n";
  }
  int64_t emitted = 0;
  for (const std::vector<int32_t>& ids : out.tokens) emitted += static_cast<int64_t>(ids.size());
  const double step_ms = out.decode_steps > 0 ? 1e3 * out.decode_seconds / out.decode_steps : 0;
  std::cerr << std::fixed << std::setprecision(2) << "generated " << emitted << " tokens for " << sequences
            << " prompt(s) on " << model.device() << " in " << a.dtype << ": prefill " << 1e3 * out.prefill_seconds
            << " ms, " << out.decode_steps << " decode steps in " << 1e3 * out.decode_seconds << " ms ("
            << step_ms << " ms a step"
            << (device.is_cuda() ? concat(", ", out.graph_replays, " replayed as a CUDA graph") : "") << ")\n";
  if (!a.profile) return;
  double total = 0;
  for (const auto& [op, ms] : op_ms) total += ms;
  std::cerr << "GPU time by op in the decode step's last replay (" << std::setprecision(3) << total
            << " ms in ops):\n| op | ms |\n|---|---|\n";
  for (const auto& [op, ms] : op_ms) std::cerr << "| " << op << " | " << ms << " |\n";
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand(
      "sample",
      "Generate text from a checkpoint: several prompts run as one batch (one prompt prints as it decodes); "
      "timings on stderr");
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
  cmd->add_option("--repetition-penalty", a->generation.sampling.repetition_penalty,
                  "Divide seen tokens' positive logits by it, multiply negative ones (1 = off)")
      ->capture_default_str();
  cmd->add_option("--stop", a->stops, "End a sample where its text reaches this string, cut before it (repeatable)");
  cmd->add_option("--seed", a->generation.sampling.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--device", a->device, "auto (a GPU when present), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "Compute dtype: f32 (the checkpoint's weights as they are), bf16 or f16")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_flag("--no-graph", a->no_graph, "On a GPU, launch each decode step kernel by kernel (no CUDA graph)");
  cmd->add_flag("--profile", a->profile,
                "On a GPU, also print each op's time in the captured decode step (CUDA events around every op "
                "entry point, read from the graph's last replay)");
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace amber::cli
