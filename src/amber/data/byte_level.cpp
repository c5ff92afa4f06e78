// The table: printable Latin-1 bytes map to themselves, the other 68 bytes map in
// order to U+0100.., exactly as GPT-2 and Hugging Face's ByteLevel define it.
#include "amber/data/byte_level.h"

#include <unordered_map>

#include "amber/data/utf8.h"

namespace amber::data {
namespace {

struct Table {
  std::array<std::string, 256> to_char;
  std::unordered_map<uint32_t, unsigned char> to_byte;
  Table() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
      utf8_append(to_char[b], cp);
      to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return table().to_char[b]; }

std::string byte_level_encode(std::string_view bytes) {
  const Table& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_char[static_cast<unsigned char>(c)];
  return out;
}

bool byte_level_decode(std::string_view mapped, std::string& out) {
  const Table& t = table();
  bool all_known = true;
  size_t pos = 0;
  while (pos < mapped.size()) {
    const size_t start = pos;
    const uint32_t cp = utf8_next(mapped, pos);
    auto it = t.to_byte.find(cp);
    if (it != t.to_byte.end()) {
      out += static_cast<char>(it->second);
    } else {
      out.append(mapped.substr(start, pos - start));
      all_known = false;
    }
  }
  return all_known;
}

}  // namespace amber::data
