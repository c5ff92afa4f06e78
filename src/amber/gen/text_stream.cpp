#include "amber/gen/text_stream.h"

#include <algorithm>

#include "amber/core/error.h"

namespace amber {

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) AMBER_CHECK(!s.empty(), "a stop string must not be empty");
}

bool TextStream::update(std::string text) {
  if (stopped_) return false;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) {
    text.resize(cut);
    stopped_ = true;
  }
  text_ = std::move(text);
  // A decode is normally a prefix of the next one; where a tokenizer's decoder changes
  // earlier text, nothing already taken is taken again.
  taken_ = std::min(taken_, text_.size());
  return !stopped_;
}

size_t TextStream::safe_end() const {
  if (stopped_) return text_.size();
  size_t end = text_.size() - incomplete_utf8_tail(text_);
  // Hold a suffix that a stop string could still continue.
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, end); n > 0; --n)
      if (text_.compare(end - n, n, s, 0, n) == 0) {
        end -= n;
        break;
      }
  return std::max(end, taken_);
}

std::string TextStream::take() {
  const size_t end = safe_end();
  std::string out = text_.substr(taken_, end - taken_);
  taken_ = end;
  return out;
}

std::string TextStream::take_rest() {
  std::string out = text_.substr(taken_);
  taken_ = text_.size();
  return out;
}

size_t incomplete_utf8_tail(const std::string& text) {
  // A character is at most four bytes: look back at most three for its lead byte.
  for (size_t back = 1; back <= std::min<size_t>(3, text.size()); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    const size_t length = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

}  // namespace amber
