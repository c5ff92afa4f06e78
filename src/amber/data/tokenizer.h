// Tokenizer: added/special tokens, pre-tokenizer and BPE model put together; encode
// text to ids and decode ids to text. Thread-safe: encode may run on many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amber/data/added_tokens.h"
#include "amber/data/bpe_model.h"
#include "amber/data/normalizer.h"
#include "amber/data/pretokenizer.h"

namespace amber::data {

// How decoding undoes a SentencePiece-style spelling of spaces: `replacement` ("▁")
// becomes ' ' in every token, then up to `strip_leading` spaces leave the start of the
// text (a Strip decoder after Fuse). Hugging Face's Metaspace decoder instead drops every
// replacement from the first token (`first_token_drops`). An empty replacement leaves
// tokens as they are.
struct SpaceDecoding {
  std::string replacement;
  int strip_leading = 0;
  bool first_token_drops = false;
};

class Tokenizer {
 public:
  Tokenizer(BpeModel model, PreTokenizer pre_tokenizer, std::vector<AddedToken> added_tokens,
            Normalizer normalizer = {}, SpaceDecoding spaces = {});

  // `text` must be valid UTF-8 (the error gives the byte offset otherwise).
  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // Special tokens decode to their text, so decode(encode(x)) == x for valid UTF-8 x.
  std::string decode(std::span<const int32_t> ids) const;

  // One past the largest id, counting added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;

  const BpeModel& model() const { return model_; }
  const PreTokenizer& pre_tokenizer() const { return pre_tokenizer_; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  const Normalizer& normalizer() const { return normalizer_; }
  const SpaceDecoding& space_decoding() const { return spaces_; }

 private:
  // `at_text_start`: the segment begins the text (no added token before it).
  void encode_text(std::string_view segment, bool at_text_start, std::vector<int32_t>& out) const;

  BpeModel model_;
  PreTokenizer pre_tokenizer_;
  std::vector<AddedToken> added_tokens_;
  Normalizer normalizer_;
  SpaceDecoding spaces_;
  AddedTokenMatcher matcher_;
  std::vector<int32_t> added_index_;  // id -> index into added_tokens_, or -1
  int32_t vocab_size_ = 0;
  uint64_t instance_;  // keys the per-thread piece cache
};

}  // namespace amber::data
