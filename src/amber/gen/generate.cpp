#include "amber/gen/generate.h"

#include "amber/core/error.h"

namespace amber {
namespace {

CachedStep make_step(const std::vector<int32_t>& counts, const std::vector<int32_t>& starts) {
  CachedStep step;
  step.starts = starts;
  step.cu_q.assign(counts.size() + 1, 0);
  for (size_t s = 0; s < counts.size(); ++s) step.cu_q[s + 1] = step.cu_q[s] + counts[s];
  std::vector<int32_t> positions;
  for (size_t s = 0; s < counts.size(); ++s)
    for (int32_t j = 0; j < counts[s]; ++j) positions.push_back(starts[s] + j);
  step.positions = Tensor::from_vector(positions, {static_cast<int64_t>(positions.size())});
  return step;
}

}  // namespace

std::vector<std::vector<int32_t>> generate(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerationConfig& config) {
  validate_sampling(config.sampling);
  AMBER_CHECK(!prompts.empty(), "generate: no prompts");
  AMBER_CHECK(config.max_new_tokens >= 0, "max_new_tokens must be >= 0");
  const int64_t model_vocab = model.config().vocab_size;
  AMBER_CHECK(config.vocab_limit >= 0 && config.vocab_limit <= model_vocab, "generate: vocab_limit ",
              config.vocab_limit, " must lie in [0, ", model_vocab, "], the model's vocabulary (0 = every id)");
  const int64_t sampled_ids = config.vocab_limit > 0 ? config.vocab_limit : model_vocab;
  const int sequences = static_cast<int>(prompts.size());
  int longest = 0;
  std::vector<int32_t> tokens, counts, starts(static_cast<size_t>(sequences), 0);
  for (int s = 0; s < sequences; ++s) {
    AMBER_CHECK(!prompts[s].empty(), "prompt ", s, " is empty; start it with at least one token (e.g. bos)");
    AMBER_CHECK(static_cast<int64_t>(prompts[s].size()) + config.max_new_tokens <= model.config().max_position,
                "prompt ", s + 1, " has ", prompts[s].size(), " tokens, which with ", config.max_new_tokens,
                " new tokens is past the model's context of ", model.config().max_position,
                " positions (model.max_position); shorten the prompt or ask for fewer new tokens");
    longest = std::max(longest, static_cast<int>(prompts[s].size()));
    tokens.insert(tokens.end(), prompts[s].begin(), prompts[s].end());
    counts.push_back(static_cast<int32_t>(prompts[s].size()));
  }
  std::vector<LayerCache> cache = model.make_kv_cache(sequences, longest + config.max_new_tokens);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(sequences));
  std::vector<bool> done(static_cast<size_t>(sequences), false);
  for (int step = 0; step < config.max_new_tokens; ++step) {
    const CachedStep cached = make_step(counts, starts);
    const Tensor logits =
        model.infer_last_logits(Tensor::from_vector(tokens, {static_cast<int64_t>(tokens.size())}), cached, cache);
    const int64_t vocab = logits.size(1);
    const std::vector<double> all = logits.to_doubles();
    tokens.clear();
    bool any_active = false;
    for (int s = 0; s < sequences; ++s) {
      starts[s] += counts[s];
      counts[s] = 1;
      // Finished sequences still step (the cache keeps one shape) but emit nothing.
      const std::vector<double> row(all.begin() + s * vocab, all.begin() + s * vocab + sampled_ids);
      const uint64_t draw = (static_cast<uint64_t>(s) << 32) | static_cast<uint64_t>(step);
      const int32_t next = sample_token(row, config.sampling, draw);
      tokens.push_back(next);
      if (done[s]) continue;
      out[s].push_back(next);
      done[s] = next == config.eos_id;
      any_active = any_active || !done[s];
    }
    if (!any_active) break;
  }
  return out;
}

}  // namespace amber
