#include "amber/train/evaluator.h"

#include "amber/core/targets.h"
#include "amber/gen/generate.h"

namespace amber {

Evaluator::Evaluator(const RunConfig& config, const RunData& data) : config_(config), data_(data) {}

EvalResult Evaluator::evaluate(LanguageModel& model) const {
  EvalResult r;
  double loss = 0, unigram = 0;
  for (const data::Batch& b : data_.eval_batches) {
    const LMHead::Loss l = model.evaluate(b.tokens, b.targets, b.seq);
    loss += l.sum - l.z_loss_sum;  // report cross-entropy alone
    r.tokens += l.tokens;
    const int32_t* t = b.targets.data<int32_t>();
    for (int64_t i = 0; i < b.targets.numel(); ++i)
      if (t[i] != kNoTarget) unigram -= data_.unigram_log_prob[static_cast<size_t>(t[i])];
  }
  if (r.tokens > 0) {
    r.loss = loss / static_cast<double>(r.tokens);
    r.unigram = unigram / static_cast<double>(r.tokens);
  }
  return r;
}

std::vector<std::string> Evaluator::samples(LanguageModel& model, int64_t step) const {
  const TrainConfig& t = config_.train;
  GenerationConfig g;
  g.max_new_tokens = t.sample_tokens;
  g.eos_id = data_.eos.value_or(-1);
  g.vocab_limit = data_.tokenizer->vocab_size();  // a padded vocabulary's extra ids have no text
  g.sampling.temperature = 0.8;
  g.sampling.top_p = 0.95;
  g.sampling.seed = t.seed + static_cast<uint64_t>(step);
  std::vector<std::string> texts;
  const Generation out = generate(model, data_.sample_prompts, g);
  for (std::vector<int32_t> ids : out.tokens) {
    if (!ids.empty() && data_.eos && ids.back() == *data_.eos) ids.pop_back();
    texts.push_back(data_.tokenizer->decode(ids));
  }
  return texts;
}

}  // namespace amber
