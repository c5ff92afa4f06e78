// Token counts of a split: how often each id occurs, and in how many documents. `amber
// tokenize` stores the training split's beside its shards (the manifest names the file),
// so that a run's unigram baseline reads one small file instead of every training token.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace amber::data {

struct TokenCounts {
  std::vector<int64_t> counts;  // per token id, up to the largest id seen (or the vocabulary)
  int64_t documents = 0;
  int64_t tokens = 0;

  void add_document(std::span<const int32_t> ids);
};

// Counts every document of these shards, reading each whole.
TokenCounts count_shard_tokens(const std::vector<std::string>& shards);

// The counts of dir's `split` that the manifest names (as "<split>_token_counts"), or
// nothing for a folder made before amber tokenize stored them. A named file that is
// missing or damaged is an error naming it.
std::optional<TokenCounts> stored_token_counts(const std::string& dir, const std::string& split);

// The stored form: {"documents", "tokens", "counts": [per id]}.
nlohmann::ordered_json token_counts_json(const TokenCounts& counts);

}  // namespace amber::data
