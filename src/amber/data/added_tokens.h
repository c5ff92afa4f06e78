// Added and special tokens (bos, eos, pad, user-defined): found in raw text before
// pre-tokenization so they are never split, as Hugging Face's added vocabulary does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "amber/data/utf8.h"

namespace amber::data {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;
  bool normalized = false;  // kept for the JSON round trip; amber has no normalizer
  bool lstrip = false;      // the match swallows the whitespace before it
  bool rstrip = false;      // the match swallows the whitespace after it
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Walks `text` (valid UTF-8), calling on_text(segment) for text between tokens and
  // on_token(id) for each token found (leftmost match, longest first), with lstrip and
  // rstrip whitespace dropped as Hugging Face does.
  template <class OnText, class OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    size_t last = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
      const Entry* hit = nullptr;
      for (const Entry& e : candidates) {
        if (text.compare(pos, e.content.size(), e.content) == 0) {
          hit = &e;
          break;
        }
      }
      if (!hit) {
        ++pos;
        continue;
      }
      size_t start = pos;
      size_t stop = pos + hit->content.size();
      if (hit->lstrip) {
        while (start > last) {
          size_t prev = start - 1;
          while (prev > last && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
          size_t at = prev;
          if (!is_unicode_whitespace(utf8_next(text, at))) break;
          start = prev;
        }
      }
      if (hit->rstrip) {
        while (stop < text.size()) {
          size_t next = stop;
          if (!is_unicode_whitespace(utf8_next(text, next))) break;
          stop = next;
        }
      }
      if (start > last) on_text(text.substr(last, start - last));
      on_token(hit->id);
      pos = last = stop;
    }
    if (last < text.size()) on_text(text.substr(last));
  }

 private:
  struct Entry {
    std::string content;
    int32_t id;
    bool lstrip, rstrip;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;  // each list longest first
};

}  // namespace amber::data
