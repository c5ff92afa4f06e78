// The training data loader: a seeded per-epoch permutation of every document (chunk)
// across all shards, greedy packing under a token budget, next-token targets inside
// documents only, a JSON state that resumes on exactly the next batch, a background
// thread that prepares batches ahead, and a process's share of each step when several
// train together (LoaderShare).
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

// Which micro-batches of every step this process takes. A step is ranks x per_rank
// micro-batches in the loader's order, the same whatever the split; rank r takes the
// per_rank consecutive ones from r * per_rank and steps over the others knowing only
// their documents' lengths (from the shard index), never reading their tokens. So the
// global batches are a function of the seed alone, and the state at a step's end is the
// same on every rank. The default is one process taking every micro-batch.
struct LoaderShare {
  int rank = 0;
  int ranks = 1;
  int per_rank = 1;
};

struct LoaderConfig {
  std::vector<std::string> shards;  // e.g. list_shards(dir, "train")
  int64_t token_budget = 8192;      // tokens per micro-batch, at most
  int32_t max_seq_len = 2048;       // longer documents become chunks of at most this many tokens
  uint64_t seed = 0;                // permutation seed (a restored state brings its own)
  int32_t bos_id = -1;              // >= 0: put before every document
  int32_t eos_id = -1;              // >= 0: put after every document
  int prefetch = 2;                 // batches prepared ahead; 0 = on the caller's thread
  LoaderShare share;
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

  // This process's next micro-batch; epochs follow each other without end.
  Batch next();
  // The tokens with a target in the whole step (every rank's micro-batches) that the
  // last batch next() returned belongs to: a step's loss divides by it.
  int64_t step_trained_tokens() const;

  // The state after the last batch next() returned (prefetched batches do not count).
  // After this process's last micro-batch of a step it is the step's end, which every
  // rank shares, so a checkpoint taken there resumes at any number of processes.
  LoaderState state() const;
  // The state plus what it is only valid for (dataset size, packing settings).
  nlohmann::json state_json() const;
  // Continues from a state_json(); the error names any setting that differs.
  void restore(const nlohmann::json& state);

  int64_t num_chunks() const { return static_cast<int64_t>(chunk_start_.back()); }
  int64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  // Where this process stands: the next micro-batch is its `slot`-th of the step that
  // ends at step_end and trains step_tokens tokens.
  struct Position {
    LoaderState state;
    int slot = 0;
    int64_t step_tokens = 0;
    LoaderState step_end;
  };
  struct Produced {
    Batch batch;
    Position after;
  };
  Produced produce(const Position& from) const;
  // Greedy packing of one micro-batch from `from`: take(doc, chunk, length) for each of
  // its chunks; returns the state after it.
  template <class Take>
  LoaderState pack(const LoaderState& from, Take&& take) const;
  Batch read(const LoaderState& from, LoaderState& after) const;
  int64_t chunk_length(uint64_t doc, uint64_t chunk) const;
  void start_prefetch();
  void stop_prefetch();

  LoaderConfig config_;
  std::vector<Shard> shards_;
  std::vector<uint64_t> shard_first_doc_;  // global id of each shard's first document, + total
  std::vector<uint64_t> doc_length_;       // per global document, bos/eos included
  std::vector<uint64_t> chunk_start_;      // per global document: index of its first chunk, + total
  int64_t tokens_per_epoch_ = 0;

  Position consumed_;  // after the last batch handed out
  Position produced_;  // after the last batch prepared

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Produced> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace amber::data
