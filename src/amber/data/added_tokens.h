// Added and special tokens (bos, eos, pad, user-defined): found in raw text before
// pre-tokenization so they are never split, as Hugging Face's added vocabulary does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace amber::data {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;
  bool normalized = false;  // kept for the JSON round trip; amber has no normalizer
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Walks `text`, calling on_text(segment) for text between tokens and on_token(id) for
  // each token found (leftmost match, longest first).
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
      if (pos > last) on_text(text.substr(last, pos - last));
      on_token(hit->id);
      pos += hit->content.size();
      last = pos;
    }
    if (last < text.size()) on_text(text.substr(last));
  }

 private:
  struct Entry {
    std::string content;
    int32_t id;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;  // each list longest first
};

}  // namespace amber::data
