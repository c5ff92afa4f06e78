// One sequence's generated text as it grows, for printing while it decodes and for
// stop strings. The caller hands in the whole decoded text after each token (a
// tokenizer's decode of a sequence is not the concatenation of its tokens' decodes);
// the stream cuts it at the first stop string and releases text only up to the last
// complete UTF-8 character that cannot still turn into a stop string. So a byte-level
// model's half character waits for its other bytes instead of printing as U+FFFD, and a
// stop string never shows in part.
#pragma once

#include <string>
#include <vector>

namespace amber {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops = {});

  // The sequence's whole text so far. Returns false once it holds a stop string (the
  // text is then cut before it and later updates are ignored).
  bool update(std::string text);
  bool stopped() const { return stopped_; }
  // Text past what was taken before, up to the safe end; counts it as taken.
  std::string take();
  // The rest, held bytes included, once the sequence has ended.
  std::string take_rest();
  // The text so far, cut at the stop string.
  const std::string& text() const { return text_; }

 private:
  size_t safe_end() const;

  std::vector<std::string> stops_;
  std::string text_;
  size_t taken_ = 0;
  bool stopped_ = false;
};

// Bytes at the end of `text` that begin a UTF-8 character whose remaining bytes have
// not arrived (0 when the text ends on a whole character or on invalid bytes that no
// later byte can complete).
size_t incomplete_utf8_tail(const std::string& text);

}  // namespace amber
