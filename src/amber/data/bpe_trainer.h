// Byte-level BPE training: count pre-tokenized pieces, then repeatedly merge the most
// frequent adjacent pair. Deterministic: ties go to the lexicographically smallest pair.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "amber/data/pretokenizer.h"
#include "amber/data/tokenizer.h"

namespace amber::data {

struct BpeTrainerOptions {
  // Total vocabulary: 256 byte tokens (ids 0..255 are bytes 0..255), the learned
  // merges, then the special tokens in the order given.
  int32_t vocab_size = 8192;
  std::vector<std::string> special_tokens = {"<|bos|>", "<|eos|>", "<|pad|>"};
  PreTokenizer pre_tokenizer = PreTokenizer::llama3();  // must end in ByteLevel
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged
  std::function<void(int32_t done, int32_t target)> on_progress;  // called every 256 merges
};

class BpeTrainer {
 public:
  explicit BpeTrainer(BpeTrainerOptions options);

  // Counts the pieces of these documents (on all OpenMP threads); call any number of times.
  void add_documents(const std::vector<std::string>& documents);
  int64_t distinct_pieces() const { return static_cast<int64_t>(piece_counts_.size()); }

  // Learns the merges and returns the finished tokenizer.
  Tokenizer train() const;

 private:
  BpeTrainerOptions options_;
  AddedTokenMatcher specials_;
  std::unordered_map<std::string, int64_t> piece_counts_;
};

}  // namespace amber::data
