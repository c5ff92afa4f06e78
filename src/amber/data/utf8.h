// UTF-8 helpers for the tokenizer and corpus readers: validation, lossy repair and
// code point iteration. Everything downstream (PCRE2 matching, BPE) assumes valid UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace amber::data {

// Byte offset of the first invalid sequence, or text.size() when the text is valid.
size_t utf8_first_invalid(std::string_view text);

// Replaces every invalid byte with U+FFFD; returns how many were replaced.
size_t utf8_repair(std::string& text);

// Length in bytes of the (valid) sequence that starts with `lead`.
inline int utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Decodes the valid sequence at text[pos]; advances pos past it.
uint32_t utf8_next(std::string_view text, size_t& pos);

void utf8_append(std::string& out, uint32_t code_point);

// Unicode White_Space (what Rust's char::is_whitespace, and so Hugging Face, uses).
bool is_unicode_whitespace(uint32_t code_point);

}  // namespace amber::data
