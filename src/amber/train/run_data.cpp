#include "amber/train/run_data.h"

#include <cmath>

#include "amber/core/error.h"
#include "amber/data/prompts.h"
#include "amber/data/tokenize_corpus.h"
#include "amber/data/tokenizer_json.h"

namespace amber {

std::vector<double> unigram_log_probs(const data::TokenCounts& counts, int64_t vocab_size,
                                      std::optional<int32_t> bos, std::optional<int32_t> eos,
                                      const std::string& origin) {
  std::vector<double> p(static_cast<size_t>(vocab_size), 1.0);
  for (size_t id = 0; id < counts.counts.size(); ++id) {
    if (counts.counts[id] == 0) continue;
    AMBER_CHECK(static_cast<int64_t>(id) < vocab_size, origin, ": token id ", id, " is outside model.vocab_size ",
                vocab_size, "; the shards were made with a larger tokenizer");
    p[id] += static_cast<double>(counts.counts[id]);
  }
  const auto documents = static_cast<double>(counts.documents);
  if (bos) p[static_cast<size_t>(*bos)] += documents;
  if (eos) p[static_cast<size_t>(*eos)] += documents;
  // Every term is a whole number below 2^53, so the sums are exact in any order.
  const double total = static_cast<double>(vocab_size) + static_cast<double>(counts.tokens) +
                       static_cast<double>((bos ? 1 : 0) + (eos ? 1 : 0)) * documents;
  for (double& x : p) x = std::log(x / total);
  return p;
}

RunData::RunData(const RunConfig& c, std::ostream& console, data::LoaderShare share) {
  AMBER_CHECK(!c.data.dir.empty(), "data.dir is not set: point it at the output folder of `amber tokenize`");
  if (!c.data.tokenizer.empty()) tokenizer = data::load_tokenizer_json(c.data.tokenizer);
  const data::Tokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  bos = data::special_token_id(tok, c.data.tokenizer, c.data.bos, "bos");
  eos = data::special_token_id(tok, c.data.tokenizer, c.data.eos, "eos");
  if (tokenizer)
    AMBER_CHECK(tokenizer->vocab_size() <= c.model.vocab_size, "the tokenizer has ", tokenizer->vocab_size(),
                " tokens but model.vocab_size is ", c.model.vocab_size, "; raise model.vocab_size");

  const data::ShardSetCheck shard_set = data::check_shards(c.data.dir, tok, c.data.tokenizer);
  if (!shard_set.notice.empty()) console << "data: " << shard_set.notice << "\n";
  AMBER_CHECK(shard_set.vocab_size <= c.model.vocab_size, c.data.dir, " was tokenized with ", shard_set.vocab_size,
              " tokens but model.vocab_size is ", c.model.vocab_size, "; raise model.vocab_size");
  const std::vector<std::string> train_shards = data::list_shards(c.data.dir, "train");
  const std::vector<std::string> val_shards = data::list_shards(c.data.dir, "val");
  AMBER_CHECK(!train_shards.empty(), "no training shards in ", c.data.dir, "; run `amber tokenize` first");
  AMBER_CHECK(c.train.sample_every == 0 || (tokenizer && !c.train.sample_prompts.empty()),
              "train.sample_every = ", c.train.sample_every, " needs data.tokenizer (to read the prompts and the ",
              "samples) and train.sample_prompts (\"\" samples after bos alone); or set train.sample_every = 0");
  // Encoded now, so that a prompt that cannot start a sample stops the run before its first step.
  for (const std::string& p : c.train.sample_every > 0 ? c.train.sample_prompts : std::vector<std::string>{}) {
    sample_prompts.push_back(data::prompt_ids(*tokenizer, bos, p, "train.sample_prompts"));
    const int64_t positions = static_cast<int64_t>(sample_prompts.back().size()) + c.train.sample_tokens;
    AMBER_CHECK(positions <= c.model.max_position, "train.sample_prompts: '", p, "' (", sample_prompts.back().size(),
                " tokens) and train.sample_tokens = ", c.train.sample_tokens, " need ", positions,
                " positions, past model.max_position ", c.model.max_position, "; shorten the prompt or the samples");
  }
  data::LoaderConfig lc;
  lc.shards = train_shards;
  lc.token_budget = c.train.micro_batch_tokens;
  lc.max_seq_len = c.data.max_seq_len;
  lc.seed = c.train.seed;
  lc.bos_id = bos.value_or(-1);
  lc.eos_id = eos.value_or(-1);
  lc.share = share;
  loader = std::make_unique<data::Loader>(lc);

  if (!val_shards.empty()) {
    data::LoaderConfig vc = lc;
    vc.shards = val_shards;
    vc.seed = 0;
    vc.prefetch = 0;
    vc.share = {};
    data::Loader val(vc);
    int64_t tokens = 0;
    while (static_cast<int>(eval_batches.size()) < c.train.eval_batches && tokens < val.tokens_per_epoch()) {
      eval_batches.push_back(val.next());
      tokens += eval_batches.back().tokens.numel();
    }
  }
  // Checked now, not at the first evaluation, which may come hours into the run.
  for (const data::Batch& b : eval_batches) {
    const int32_t* ids = b.tokens.data<int32_t>();
    for (int64_t i = 0; i < b.tokens.numel(); ++i)
      AMBER_CHECK(ids[i] >= 0 && ids[i] < c.model.vocab_size, c.data.dir, ": validation token id ", ids[i],
                  " is outside model.vocab_size ", c.model.vocab_size,
                  "; the shards were made with a larger tokenizer");
  }

  // The baseline's counts come from `amber tokenize`; shards made before it stored them
  // are counted here, which reads the whole training split.
  std::optional<data::TokenCounts> counts = data::stored_token_counts(c.data.dir, "train");
  if (!counts) {
    console << "data: " << c.data.dir << " has no stored token counts (made by an older amber tokenize), so the "
            << "unigram baseline reads the whole training split at every start; tokenizing again stores them\n";
    counts = data::count_shard_tokens(train_shards);
  }
  unigram_log_prob = unigram_log_probs(*counts, c.model.vocab_size, bos, eos, c.data.dir);
}

}  // namespace amber
