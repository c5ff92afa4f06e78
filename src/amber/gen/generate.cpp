#include "amber/gen/generate.h"

#include <chrono>

#include "amber/core/error.h"
#include "amber/gen/decode_step.h"

namespace amber {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_prompts(const LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                   const GenerationConfig& config) {
  validate_sampling(config.sampling);
  AMBER_CHECK(!prompts.empty(), "generate: no prompts");
  AMBER_CHECK(config.max_new_tokens >= 0, "max_new_tokens must be >= 0");
  const int64_t model_vocab = model.config().vocab_size;
  AMBER_CHECK(config.vocab_limit >= 0 && config.vocab_limit <= model_vocab, "generate: vocab_limit ",
              config.vocab_limit, " must lie in [0, ", model_vocab, "], the model's vocabulary (0 = every id)");
  for (size_t s = 0; s < prompts.size(); ++s) {
    AMBER_CHECK(!prompts[s].empty(), "prompt ", s, " is empty; start it with at least one token (e.g. bos)");
    AMBER_CHECK(static_cast<int64_t>(prompts[s].size()) + config.max_new_tokens <= model.config().max_position,
                "prompt ", s + 1, " has ", prompts[s].size(), " tokens, which with ", config.max_new_tokens,
                " new tokens is past the model's context of ", model.config().max_position,
                " positions (model.max_position); shorten the prompt or ask for fewer new tokens");
  }
}

// Each sequence's choice from its row of `logits` [S x V]: penalised by what it has seen,
// cut to the sampled ids, drawn from stream (s, step) of the seed. Rows are independent,
// so they are sampled in parallel.
std::vector<int32_t> choose(const HostLogits& logits, int64_t sampled_ids, const std::vector<SeenTokens>& seen,
                            const SamplingConfig& sampling, int step) {
  const int sequences = static_cast<int>(seen.size());
  std::vector<int32_t> next(static_cast<size_t>(sequences));
#pragma omp parallel for if (sequences > 1)
  for (int s = 0; s < sequences; ++s) {
    std::vector<double> candidates;
    logits.row(s, sampled_ids, candidates);
    seen[static_cast<size_t>(s)].penalise(candidates, sampling.repetition_penalty);
    const uint64_t draw = (static_cast<uint64_t>(s) << 32) | static_cast<uint64_t>(step);
    next[static_cast<size_t>(s)] = sample_token(candidates, sampling, draw);
  }
  return next;
}

}  // namespace

Generation generate(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                    const GenerationConfig& config) {
  check_prompts(model, prompts, config);
  const int64_t vocab = model.config().vocab_size;
  const int64_t sampled_ids = config.vocab_limit > 0 ? config.vocab_limit : vocab;
  const int sequences = static_cast<int>(prompts.size());
  int longest = 0;
  std::vector<int32_t> tokens, counts, zeros(static_cast<size_t>(sequences), 0);
  std::vector<SeenTokens> seen;
  for (const std::vector<int32_t>& p : prompts) {
    longest = std::max(longest, static_cast<int>(p.size()));
    tokens.insert(tokens.end(), p.begin(), p.end());
    counts.push_back(static_cast<int32_t>(p.size()));
    seen.emplace_back(p, vocab);
  }
  Generation g;
  g.tokens.resize(static_cast<size_t>(sequences));
  if (config.max_new_tokens == 0) return g;

  Clock::time_point start = Clock::now();
  std::vector<LayerCache> cache = model.make_kv_cache(sequences, longest + config.max_new_tokens);
  const Device device = model.device();
  const CachedStep prefill = CachedStep::packed(counts, zeros, device);
  const Tensor ids = Tensor::from_vector(tokens, {static_cast<int64_t>(tokens.size())}).to(device);
  const Tensor first = model.infer_last_logits(ids, prefill, cache).to(Device::cpu());
  HostLogits logits(first.raw(), first.dtype(), vocab);
  g.prefill_seconds = seconds_since(start);

  start = Clock::now();
  DecodeStep decode(model, cache, sequences, config.cuda_graph);
  std::vector<int32_t> positions = counts;  // where each sequence's next token goes
  std::vector<bool> done(static_cast<size_t>(sequences), false);
  for (int step = 0;; ++step) {
    const std::vector<int32_t> next = choose(logits, sampled_ids, seen, config.sampling, step);
    bool any_active = false;
    for (int s = 0; s < sequences; ++s) {
      if (done[s]) continue;
      const int32_t token = next[static_cast<size_t>(s)];
      g.tokens[static_cast<size_t>(s)].push_back(token);
      seen[static_cast<size_t>(s)].add(token);
      const bool go_on = config.on_token ? config.on_token(s, token) : true;
      done[s] = token == config.eos_id || !go_on;
      any_active = any_active || !done[s];
    }
    if (!any_active || step + 1 == config.max_new_tokens) break;
    // Finished sequences still step (the cache keeps one shape) but emit nothing.
    logits = decode.run(next, positions);
    ++g.decode_steps;
    g.graph_replays += decode.replaying() ? 1 : 0;
    for (int32_t& p : positions) ++p;
  }
  g.decode_seconds = seconds_since(start);
  return g;
}

}  // namespace amber
