// Merging follows Hugging Face exactly: repeatedly apply the lowest-ranked adjacent
// pair, leftmost first, using a heap so long pieces stay O(n log n).
#include "amber/data/bpe_model.h"

#include <cstdio>
#include <queue>

#include "amber/core/error.h"
#include "amber/data/byte_level.h"
#include "amber/data/utf8.h"

namespace amber::data {

BpeModel::BpeModel(std::vector<std::string> vocab, std::vector<std::pair<std::string, std::string>> merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)), merges_(std::move(merges)), options_(std::move(options)) {
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_[id].empty()) continue;
    const bool fresh = token_ids_.emplace(vocab_[id], static_cast<int32_t>(id)).second;
    AMBER_CHECK(fresh, where, ": token \"", vocab_[id], "\" appears twice in the vocabulary");
  }
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    const auto& [left, right] = merges_[rank];
    const int32_t a = token_to_id(left), b = token_to_id(right), r = token_to_id(left + right);
    AMBER_CHECK(a >= 0 && b >= 0 && r >= 0, where, ": merge ", rank, " (\"", left, "\" \"", right,
                "\") uses a token missing from the vocabulary; the merges and vocab do not belong together");
    // A pair listed twice keeps its first (lowest) rank, as Hugging Face does.
    merge_table_.emplace(pair_key(a, b), Merge{static_cast<int32_t>(rank), r});
  }
  for (int b = 0; b < 256; ++b) {
    byte_token_[b] = token_to_id(byte_level_char(static_cast<unsigned char>(b)));
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    fallback_token_[b] = token_to_id(name);
  }
  if (!options_.unk_token.empty()) {
    unk_id_ = token_to_id(options_.unk_token);
    AMBER_CHECK(unk_id_ >= 0, where, ": unk_token \"", options_.unk_token, "\" is not in the vocabulary");
  }
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  auto it = token_ids_.find(token);
  return it == token_ids_.end() ? -1 : it->second;
}

int BpeModel::byte_fallback_value(int32_t id) const {
  const std::string& t = vocab_[id];
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  unsigned value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return static_cast<int>(value);
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  // An unknown unit becomes its <0xXX> bytes (byte fallback) or the unknown token.
  auto unknown = [&](std::string_view unit) {
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : unit) all = all && fallback_token_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : unit) symbols.push_back(fallback_token_[static_cast<unsigned char>(c)]);
        return;
      }
    }
    AMBER_CHECK(unk_id_ >= 0, "the tokenizer has no token for \"", unit,
                "\" and neither byte_fallback nor an unk_token; use a tokenizer whose alphabet covers the input");
    if (!(options_.fuse_unk && !symbols.empty() && symbols.back() == unk_id_)) symbols.push_back(unk_id_);
  };
  if (options_.byte_level) {
    for (char c : piece) {
      const int32_t id = byte_token_[static_cast<unsigned char>(c)];
      if (id >= 0) symbols.push_back(id);
      else unknown(byte_level_char(static_cast<unsigned char>(c)));
    }
    return;
  }
  size_t pos = 0;
  while (pos < piece.size()) {
    const size_t n = utf8_length(static_cast<unsigned char>(piece[pos]));
    const std::string_view unit = piece.substr(pos, n);
    const int32_t id = token_to_id(unit);
    if (id >= 0) symbols.push_back(id);
    else unknown(unit);
    pos += n;
  }
}

void BpeModel::apply_merges(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  // Symbols live in a doubly linked list over their starting slots; a merged-away
  // slot is marked with id -1 so stale heap entries are recognised and skipped.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merge_table_.find(pair_key(symbols[pos], symbols[next[pos]]));
    if (it != merge_table_.end()) heap.push({it->second.rank, pos, symbols[pos], symbols[next[pos]]});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int right = next[c.pos];
    if (symbols[c.pos] != c.left || right < 0 || symbols[right] != c.right) continue;
    symbols[c.pos] = merge_table_.at(pair_key(c.left, c.right)).result;
    symbols[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  int kept = 0;
  for (int i = 0; i >= 0; i = next[i]) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = options_.byte_level ? token_to_id(byte_level_encode(piece)) : token_to_id(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  initial_symbols(piece, symbols);
  apply_merges(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace amber::data
