// A writer of Thrift's compact protocol for tests: builds inputs for ThriftReader and
// the RLE/bit-packed hybrid decoder (whose run headers are the same varints).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "amber/data/thrift_compact.h"

namespace amber::data::testing {

inline std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Appends compact-protocol values to `out`; field ids are delta-coded within each open
// struct, as the protocol does.
struct CompactWriter {
  std::string out;
  std::vector<int> last{0};
  void varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
    out += static_cast<char>(v);
  }
  void zigzag(int64_t v) { varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void field(int id, ThriftType t) {
    const int delta = id - last.back();
    if (delta > 0 && delta <= 15) {
      out += static_cast<char>(delta << 4 | static_cast<int>(t));
    } else {
      out += static_cast<char>(t);
      zigzag(id);
    }
    last.back() = id;
  }
  void begin() { last.push_back(0); }
  void end() {
    out += '\0';
    last.pop_back();
  }
  void binary(std::string_view s) {
    varint(s.size());
    out += s;
  }
  void list(ThriftType element, uint32_t n) {
    if (n < 15) {
      out += static_cast<char>(n << 4 | static_cast<int>(element));
    } else {
      out += static_cast<char>(0xf0 | static_cast<int>(element));
      varint(n);
    }
  }
};

}  // namespace amber::data::testing
