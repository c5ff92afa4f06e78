// The BPE model: vocabulary, ranked merges, and the merge loop that turns one
// pre-tokenized piece into token ids (Hugging Face's BPE semantics).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace amber::data {

struct BpeOptions {
  bool byte_level = false;     // pieces are raw bytes shown in GPT-2's byte alphabet
  bool ignore_merges = false;  // a piece that is itself in the vocabulary is one token
  bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens
  std::string unk_token;       // empty: no unknown token
  bool fuse_unk = false;       // consecutive unknowns become one unk token
};

class BpeModel {
 public:
  BpeModel() = default;
  // vocab[id] is the token string (empty for ids the model does not use); merges are in
  // rank order and both halves and their concatenation must be in the vocabulary.
  // `where` names the source for errors.
  BpeModel(std::vector<std::string> vocab, std::vector<std::pair<std::string, std::string>> merges,
           BpeOptions options, const std::string& where);

  // Appends the ids of one piece. Throws when a character has no token and neither
  // byte fallback nor an unknown token is configured.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string& id_to_token(int32_t id) const { return vocab_[id]; }
  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.size()); }
  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  const BpeOptions& options() const { return options_; }
  // The raw byte a <0xXX> token stands for, or -1 (only meaningful with byte fallback).
  int byte_fallback_value(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void apply_merges(std::vector<int32_t>& symbols) const;

  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_ids_;
  std::vector<std::pair<std::string, std::string>> merges_;
  std::unordered_map<uint64_t, Merge> merge_table_;
  BpeOptions options_;
  int32_t byte_token_[256];      // byte-level: id of each byte's character, or -1
  int32_t fallback_token_[256];  // byte fallback: id of <0xXX>, or -1
  int32_t unk_id_ = -1;
};

}  // namespace amber::data
