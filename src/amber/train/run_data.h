// RunData: what a run reads besides its model: the tokenizer and its bos/eos ids, the
// encoded sample prompts, the training loader, the fixed evaluation set and the unigram
// baseline. Everything is checked against the config when built, so that a setting
// that cannot work stops the run before its first step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "amber/data/batch.h"
#include "amber/data/loader.h"
#include "amber/data/token_counts.h"
#include "amber/data/tokenizer.h"
#include "amber/train/run_config.h"

namespace amber {

struct RunData {
  // `console` hears what the run should know about its data (a baseline counted now);
  // `share` is this process's part of every step (its rank among the run's processes).
  RunData(const RunConfig& config, std::ostream& console, data::LoaderShare share = {});

  std::optional<data::Tokenizer> tokenizer;
  std::optional<int32_t> bos, eos;
  std::vector<std::vector<int32_t>> sample_prompts;  // train.sample_prompts encoded, bos first
  std::unique_ptr<data::Loader> loader;
  // The first train.eval_batches of the validation split in a seed-0 order (at most one
  // epoch): identical at every evaluation and across resumes.
  std::vector<data::Batch> eval_batches;
  std::vector<double> unigram_log_prob;  // the training split's unigram model, add-one smoothed
};

// log p(id) for every id below vocab_size under the add-one-smoothed unigram model of
// `counts`, with one bos and one eos per document where the run adds them (the loader
// does). The counts' ids must lie below vocab_size; `origin` names them in the error.
std::vector<double> unigram_log_probs(const data::TokenCounts& counts, int64_t vocab_size,
                                      std::optional<int32_t> bos, std::optional<int32_t> eos,
                                      const std::string& origin);

}  // namespace amber
