// Incremental pair counting: each merge only revisits the words that contain the pair
// (an index from pair to words), and a lazy max-heap re-checks counts when popped.
#include "amber/data/bpe_trainer.h"

#include <algorithm>
#include <deque>
#include <queue>

#include <omp.h>

#include "amber/core/error.h"
#include "amber/data/byte_level.h"

namespace amber::data {
namespace {

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t pair_left(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t pair_right(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

}  // namespace

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : options_(std::move(options)) {
  AMBER_CHECK(options_.pre_tokenizer.byte_level(),
              "BPE training needs a byte-level pre-tokenizer (one ending in ByteLevel)");
  const int32_t min_size = 256 + static_cast<int32_t>(options_.special_tokens.size());
  AMBER_CHECK(options_.vocab_size >= min_size, "vocab size ", options_.vocab_size, " is below ", min_size,
              " (256 byte tokens plus ", options_.special_tokens.size(), " special tokens); raise --vocab-size");
  std::vector<AddedToken> specials;
  for (size_t i = 0; i < options_.special_tokens.size(); ++i) {
    AMBER_CHECK(!options_.special_tokens[i].empty(), "special token ", i, " is empty");
    for (size_t k = 0; k < i; ++k) {
      AMBER_CHECK(options_.special_tokens[k] != options_.special_tokens[i], "special token \"",
                  options_.special_tokens[i], "\" is given twice");
    }
    specials.push_back({static_cast<int32_t>(i), options_.special_tokens[i], true, false, false, false});
  }
  specials_ = AddedTokenMatcher(specials);
}

void BpeTrainer::add_documents(const std::vector<std::string>& documents) {
  const int threads = omp_get_max_threads();
  std::vector<std::unordered_map<std::string, int64_t>> local(threads);
#pragma omp parallel
  {
    auto& counts = local[omp_get_thread_num()];
    std::vector<std::string_view> pieces;
    std::deque<std::string> scratch;
#pragma omp for schedule(dynamic, 64)
    for (size_t d = 0; d < documents.size(); ++d) {
      // Special tokens are cut out first so no merge ever spans one.
      specials_.split(
          documents[d],
          [&](std::string_view segment) {
            pieces.clear();
            scratch.clear();
            options_.pre_tokenizer.split(segment, pieces, scratch);
            for (std::string_view p : pieces) ++counts[std::string(p)];
          },
          [](int32_t) {});
    }
  }
  for (auto& counts : local) {
    for (auto& [piece, n] : counts) piece_counts_[piece] += n;
  }
}

Tokenizer BpeTrainer::train() const {
  std::vector<std::string> tokens(256);
  for (int b = 0; b < 256; ++b) tokens[b] = byte_level_char(static_cast<unsigned char>(b));
  std::unordered_map<std::string, int32_t> token_ids;
  for (int b = 0; b < 256; ++b) token_ids[tokens[b]] = b;

  // Words in sorted order so the pair index (and so any tie) never depends on hashing.
  std::vector<std::pair<std::string, int64_t>> sorted(piece_counts_.begin(), piece_counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words(sorted.size());
  std::vector<int64_t> counts(sorted.size());
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;
  for (size_t w = 0; w < sorted.size(); ++w) {
    counts[w] = sorted[w].second;
    for (char c : sorted[w].first) words[w].push_back(static_cast<unsigned char>(c));
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t key = pair_key(words[w][i], words[w][i + 1]);
      pair_counts[key] += counts[w];
      pair_words[key].push_back(static_cast<int32_t>(w));
    }
  }

  struct Entry {
    int64_t count;
    uint64_t key;
  };
  // Highest count first; equal counts go to the smaller (left, right) token strings.
  auto worse = [&tokens](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    const std::string& xl = tokens[pair_left(x.key)];
    const std::string& yl = tokens[pair_left(y.key)];
    if (xl != yl) return xl > yl;
    return tokens[pair_right(x.key)] > tokens[pair_right(y.key)];
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (const auto& [key, n] : pair_counts) heap.push({n, key});

  const int32_t target = options_.vocab_size - static_cast<int32_t>(options_.special_tokens.size());
  const int32_t merge_target = target - 256;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<uint64_t> touched;
  while (static_cast<int32_t>(tokens.size()) < target && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    auto found = pair_counts.find(top.key);
    const int64_t current = found == pair_counts.end() ? 0 : found->second;
    if (current != top.count) {
      if (current > 0) heap.push({current, top.key});
      continue;
    }
    if (current < options_.min_frequency) break;
    const int32_t a = pair_left(top.key), b = pair_right(top.key);
    const std::string merged = tokens[a] + tokens[b];
    merges.emplace_back(tokens[a], tokens[b]);
    // A string reachable by two merge paths keeps its first id, as Hugging Face does.
    auto [it, fresh] = token_ids.emplace(merged, static_cast<int32_t>(tokens.size()));
    if (fresh) tokens.push_back(merged);
    const int32_t c = it->second;

    std::vector<int32_t> where = std::move(pair_words[top.key]);
    pair_words.erase(top.key);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    touched.clear();
    auto add = [&](int32_t l, int32_t r, int64_t n, int32_t w) {
      const uint64_t key = pair_key(l, r);
      pair_counts[key] += n;
      if (n > 0) {
        pair_words[key].push_back(w);
        touched.push_back(key);
      }
    };
    for (int32_t w : where) {
      std::vector<int32_t>& s = words[w];
      const int64_t n = counts[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != a || s[i + 1] != b) continue;
        if (i > 0) add(s[i - 1], a, -n, w);
        if (i + 2 < s.size()) add(b, s[i + 2], -n, w);
        add(a, b, -n, w);
        s[i] = c;
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        if (i > 0) add(s[i - 1], c, n, w);
        if (i + 1 < s.size()) add(c, s[i + 1], n, w);
      }
    }
    pair_counts.erase(top.key);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t key : touched) {
      if (pair_counts[key] > 0) heap.push({pair_counts[key], key});
    }
    if (options_.on_progress && merges.size() % 256 == 0) {
      options_.on_progress(static_cast<int32_t>(tokens.size()) - 256, merge_target);
    }
  }

  std::vector<AddedToken> specials;
  for (const std::string& s : options_.special_tokens) {
    specials.push_back({static_cast<int32_t>(tokens.size() + specials.size()), s, true, false, false, false});
  }
  BpeOptions bpe;
  bpe.byte_level = true;
  BpeModel model(std::move(tokens), std::move(merges), bpe, "trained BPE");
  return Tokenizer(std::move(model), options_.pre_tokenizer, std::move(specials));
}

}  // namespace amber::data
