// Packing rule (docs/data.md): walk the epoch's permutation of chunks and append each
// chunk while the batch stays within the token budget; the first chunk that does not
// fit opens the next batch. An epoch's last batch may be short; none spans two epochs.
#include "amber/data/loader.h"

#include <algorithm>

#include "amber/core/error.h"
#include "amber/data/permutation.h"

namespace amber::data {

Loader::Loader(LoaderConfig config) : config_(std::move(config)) {
  AMBER_CHECK(!config_.shards.empty(), "loader: no shards given; run amber tokenize and pass its train shards");
  AMBER_CHECK(config_.max_seq_len > 0, "loader: max_seq_len must be positive, got ", config_.max_seq_len);
  AMBER_CHECK(config_.token_budget >= config_.max_seq_len, "loader: token budget ", config_.token_budget,
              " is below max_seq_len ", config_.max_seq_len, "; a full-length chunk must fit in one micro-batch");
  AMBER_CHECK(config_.token_budget < (int64_t{1} << 31), "loader: token budget ", config_.token_budget,
              " exceeds the int32 range of cu_seqlens");
  AMBER_CHECK(config_.prefetch >= 0, "loader: prefetch must be >= 0");
  const LoaderShare& share = config_.share;
  AMBER_CHECK(share.ranks >= 1 && share.per_rank >= 1 && share.rank >= 0 && share.rank < share.ranks,
              "loader: share of rank ", share.rank, " of ", share.ranks, " with ", share.per_rank,
              " micro-batches each is not a valid split");
  const int extra = (config_.bos_id >= 0) + (config_.eos_id >= 0);
  chunk_start_.push_back(0);
  shard_first_doc_.push_back(0);
  for (const std::string& path : config_.shards) {
    shards_.push_back(Shard::open(path));
    const Shard& s = shards_.back();
    for (int32_t special : {config_.bos_id, config_.eos_id}) {
      AMBER_CHECK(special < s.vocab_size(), "loader: bos/eos id ", special, " is outside the vocabulary of ", path,
                  " (", s.vocab_size(), " tokens)");
    }
    for (int64_t d = 0; d < s.num_docs(); ++d) {
      const uint64_t len = static_cast<uint64_t>(s.doc_length(d) + extra);
      doc_length_.push_back(len);
      chunk_start_.push_back(chunk_start_.back() + (len + config_.max_seq_len - 1) / config_.max_seq_len);
      tokens_per_epoch_ += static_cast<int64_t>(len);
    }
    shard_first_doc_.push_back(shard_first_doc_.back() + static_cast<uint64_t>(s.num_docs()));
  }
  AMBER_CHECK(num_chunks() > 0, "loader: the shards hold no tokens");
  consumed_ = produced_ = Position{{config_.seed, 0, 0}, 0, 0, {}};
  start_prefetch();
}

Loader::~Loader() { stop_prefetch(); }

int64_t Loader::chunk_length(uint64_t doc, uint64_t chunk) const {
  const uint64_t start = chunk * static_cast<uint64_t>(config_.max_seq_len);
  return static_cast<int64_t>(std::min<uint64_t>(config_.max_seq_len, doc_length_[doc] - start));
}

template <class Take>
LoaderState Loader::pack(const LoaderState& from, Take&& take) const {
  const uint64_t n = static_cast<uint64_t>(num_chunks());
  const Permutation perm(n, splitmix64(from.seed) ^ splitmix64(static_cast<uint64_t>(from.epoch) + 1));
  int64_t tokens = 0;
  uint64_t cursor = static_cast<uint64_t>(from.cursor);
  while (cursor < n) {
    const uint64_t chunk_id = perm(cursor);
    const uint64_t doc = static_cast<uint64_t>(
        std::upper_bound(chunk_start_.begin(), chunk_start_.end(), chunk_id) - chunk_start_.begin() - 1);
    const uint64_t chunk = chunk_id - chunk_start_[doc];
    const int64_t len = chunk_length(doc, chunk);
    if (tokens + len > config_.token_budget) break;
    ++cursor;
    tokens += len;
    take(doc, chunk, len);
  }
  return cursor == n ? LoaderState{from.seed, from.epoch + 1, 0}
                     : LoaderState{from.seed, from.epoch, static_cast<int64_t>(cursor)};
}

Batch Loader::read(const LoaderState& from, LoaderState& after) const {
  const bool bos = config_.bos_id >= 0;
  std::vector<int32_t> tokens, targets, lengths;
  tokens.reserve(static_cast<size_t>(config_.token_budget));
  after = pack(from, [&](uint64_t doc, uint64_t chunk, int64_t len) {
    // Position p of the document's sequence [bos?] doc tokens [eos?].
    const size_t shard = static_cast<size_t>(
        std::upper_bound(shard_first_doc_.begin(), shard_first_doc_.end(), doc) - shard_first_doc_.begin() - 1);
    const Shard& s = shards_[shard];
    const int64_t local = static_cast<int64_t>(doc - shard_first_doc_[shard]);
    const int64_t first = static_cast<int64_t>(chunk) * config_.max_seq_len;
    const int64_t body_begin = bos ? 1 : 0;
    const int64_t body_end = body_begin + s.doc_length(local);
    const size_t at = tokens.size();
    tokens.resize(at + static_cast<size_t>(len));
    const int64_t lo = std::max(first, body_begin), hi = std::min(first + len, body_end);
    if (hi > lo) s.read(local, lo - body_begin, hi - lo, tokens.data() + at + (lo - first));
    if (bos && first == 0) tokens[at] = config_.bos_id;
    if (config_.eos_id >= 0 && first + len == body_end + 1) tokens[at + len - 1] = config_.eos_id;

    for (int64_t i = 0; i + 1 < len; ++i) targets.push_back(tokens[at + i + 1]);
    targets.push_back(kNoTarget);
    lengths.push_back(static_cast<int32_t>(len));
  });
  Batch batch;
  const int64_t total = static_cast<int64_t>(tokens.size());
  batch.trained_tokens = total - static_cast<int64_t>(lengths.size());
  batch.tokens = Tensor::from_vector(tokens, {total});
  batch.targets = Tensor::from_vector(targets, {total});
  batch.seq = SeqInfo::from_lengths(lengths);
  return batch;
}

// A step's first micro-batch walks the whole step by lengths alone: where this
// process's share starts, where the step ends and how many tokens it trains.
Loader::Produced Loader::produce(const Position& from) const {
  const LoaderShare& share = config_.share;
  Position at = from;
  if (at.slot == 0) {
    LoaderState s = from.state;
    at.step_tokens = 0;
    for (int k = 0; k < share.ranks * share.per_rank; ++k) {
      if (k == share.rank * share.per_rank) at.state = s;
      s = pack(s, [&](uint64_t, uint64_t, int64_t len) { at.step_tokens += len - 1; });
    }
    at.step_end = s;
  }
  Produced p;
  p.batch = read(at.state, at.state);
  if (++at.slot == share.per_rank) {
    at.state = at.step_end;
    at.slot = 0;
  }
  p.after = at;
  return p;
}

void Loader::start_prefetch() {
  if (config_.prefetch == 0) return;
  stop_ = false;
  worker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (queue_.size() >= static_cast<size_t>(config_.prefetch) || error_) {
        cv_.wait(lock);
        continue;
      }
      const Position from = produced_;
      lock.unlock();
      // Produce outside the lock: reading shards and building tensors is the slow part.
      std::optional<Produced> p;
      std::exception_ptr error;
      try {
        p = produce(from);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (stop_) break;
      if (error) {
        error_ = error;
      } else {
        produced_ = p->after;
        queue_.push_back(std::move(*p));
      }
      cv_.notify_all();
    }
  });
}

void Loader::stop_prefetch() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

Batch Loader::next() {
  if (config_.prefetch == 0) {
    Produced p = produce(consumed_);
    consumed_ = produced_ = p.after;
    return std::move(p.batch);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Produced p = std::move(queue_.front());
  queue_.pop_front();
  consumed_ = p.after;
  cv_.notify_all();
  return std::move(p.batch);
}

LoaderState Loader::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_.state;
}

int64_t Loader::step_trained_tokens() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_.step_tokens;
}

nlohmann::json Loader::state_json() const {
  const LoaderState s = state();
  return {{"format", "amber-loader-state"},
          {"version", 1},
          {"seed", s.seed},
          {"epoch", s.epoch},
          {"cursor", s.cursor},
          {"num_chunks", num_chunks()},
          {"tokens_per_epoch", tokens_per_epoch_},
          {"token_budget", config_.token_budget},
          {"max_seq_len", config_.max_seq_len},
          {"bos_id", config_.bos_id},
          {"eos_id", config_.eos_id}};
}

void Loader::restore(const nlohmann::json& j) {
  const nlohmann::json expected = state_json();
  AMBER_CHECK(j.is_object() && j.value("format", std::string()) == "amber-loader-state", "loader state: not an ",
              "amber loader state (\"format\" must be \"amber-loader-state\")");
  for (const char* key : {"version", "num_chunks", "tokens_per_epoch", "token_budget", "max_seq_len", "bos_id",
                          "eos_id"}) {
    AMBER_CHECK(j.contains(key) && j[key] == expected[key], "loader state: \"", key, "\" is ",
                j.contains(key) ? j[key].dump() : std::string("missing"), " but this loader has ",
                expected[key].dump(), "; resume with the same shards and packing settings");
  }
  for (const char* key : {"seed", "epoch", "cursor"}) {
    AMBER_CHECK(j.contains(key) && j[key].is_number_integer(), "loader state: \"", key, "\" must be an integer");
  }
  LoaderState s{j["seed"].get<uint64_t>(), j["epoch"].get<int64_t>(), j["cursor"].get<int64_t>()};
  AMBER_CHECK(s.epoch >= 0 && s.cursor >= 0 && s.cursor < num_chunks(), "loader state: cursor ", s.cursor,
              " / epoch ", s.epoch, " is outside this dataset of ", num_chunks(), " chunks");
  stop_prefetch();
  queue_.clear();
  error_ = nullptr;
  consumed_ = produced_ = Position{s, 0, 0, {}};
  start_prefetch();
}

}  // namespace amber::data
