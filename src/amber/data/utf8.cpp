// UTF-8 validation follows RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
#include "amber/data/utf8.h"

namespace amber::data {
namespace {

// Length of the valid sequence at text[pos], or 0 when it is invalid.
int valid_sequence_length(std::string_view text, size_t pos) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char c = byte(pos);
  if (c < 0x80) return 1;
  int n;
  uint32_t min;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; cp = c & 0x07; }
  else return 0;
  if (pos + n > text.size()) return 0;
  for (int i = 1; i < n; ++i) {
    const unsigned char cc = byte(pos + i);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

size_t utf8_first_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) { ++pos; continue; }
    const int n = valid_sequence_length(text, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return text.size();
}

size_t utf8_repair(std::string& text) {
  if (utf8_first_invalid(text) == text.size()) return 0;
  std::string out;
  out.reserve(text.size() + 16);
  size_t replaced = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const int n = valid_sequence_length(text, pos);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++replaced;
      ++pos;
    } else {
      out.append(text, pos, n);
      pos += n;
    }
  }
  text = std::move(out);
  return replaced;
}

uint32_t utf8_next(std::string_view text, size_t& pos) {
  const unsigned char c = static_cast<unsigned char>(text[pos]);
  const int n = utf8_length(c);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace amber::data
