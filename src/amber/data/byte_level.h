// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one printable
// Unicode character, so byte-level BPE vocabularies are valid UTF-8 strings in JSON.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace amber::data {

// The character (as UTF-8) that stands for byte b.
const std::string& byte_level_char(unsigned char b);

// Maps raw bytes to their byte-level characters.
std::string byte_level_encode(std::string_view bytes);

// Maps byte-level characters back to raw bytes; a character outside the alphabet is
// copied unchanged. Returns false when such a character was found.
bool byte_level_decode(std::string_view mapped, std::string& out);

}  // namespace amber::data
