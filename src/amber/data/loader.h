// The training data loader: a seeded per-epoch permutation of every document (chunk)
// across all shards, greedy packing under a token budget, next-token targets inside
// documents only, a JSON state that resumes on exactly the next batch, and a
// background thread that prepares batches ahead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "amber/data/batch.h"
#include "amber/data/shard.h"

namespace amber::data {

struct LoaderConfig {
  std::vector<std::string> shards;  // e.g. list_shards(dir, "train")
  int64_t token_budget = 8192;      // tokens per micro-batch, at most
  int32_t max_seq_len = 2048;       // longer documents become chunks of at most this many tokens
  uint64_t seed = 0;                // permutation seed (a restored state brings its own)
  int32_t bos_id = -1;              // >= 0: put before every document
  int32_t eos_id = -1;              // >= 0: put after every document
  int prefetch = 2;                 // batches prepared ahead; 0 = on the caller's thread
};

// Where the loader stands: the next batch starts at position `cursor` of epoch
// `epoch`'s permutation of chunks, a permutation drawn from (seed, epoch).
struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t cursor = 0;
};

class Loader {
 public:
  explicit Loader(LoaderConfig config);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next micro-batch; epochs follow each other without end.
  Batch next();

  // The state after the last batch next() returned (prefetched batches do not count).
  LoaderState state() const;
  // The state plus what it is only valid for (dataset size, packing settings).
  nlohmann::json state_json() const;
  // Continues from a state_json(); the error names any setting that differs.
  void restore(const nlohmann::json& state);

  int64_t num_chunks() const { return static_cast<int64_t>(chunk_start_.back()); }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  struct Produced {
    Batch batch;
    LoaderState after;
  };
  Produced produce(const LoaderState& from) const;
  int64_t chunk_length(uint64_t doc, uint64_t chunk) const;
  void start_prefetch();
  void stop_prefetch();

  LoaderConfig config_;
  std::vector<Shard> shards_;
  std::vector<uint64_t> shard_first_doc_;  // global id of each shard's first document, + total
  std::vector<uint64_t> doc_length_;       // per global document, bos/eos included
  std::vector<uint64_t> chunk_start_;      // per global document: index of its first chunk, + total
  int64_t tokens_per_epoch_ = 0;

  LoaderState consumed_;  // after the last batch handed out
  LoaderState produced_;  // after the last batch prepared

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Produced> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace amber::data
