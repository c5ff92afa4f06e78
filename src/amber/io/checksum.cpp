#include "amber/io/checksum.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "amber/core/error.h"

namespace amber {
namespace {

constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts only, as amber's file formats are
  return v;
}
uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * P2, 31) * P1; }
uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round(0, v)) * P1 + P4; }

// XXH64 fed in pieces: whole 32-byte stripes go through the four lanes as they arrive,
// the remainder waits in `tail` until finish().
class Xxh64 {
 public:
  void update(const unsigned char* p, size_t n) {
    total_ += n;
    while (n > 0) {
      const size_t take = std::min(n, sizeof(tail_) - tail_size_);
      std::memcpy(tail_ + tail_size_, p, take);
      tail_size_ += take;
      p += take;
      n -= take;
      if (tail_size_ == sizeof(tail_)) {
        for (int lane = 0; lane < 4; ++lane) v_[lane] = round(v_[lane], read64(tail_ + 8 * lane));
        tail_size_ = 0;
      }
    }
  }
  uint64_t finish() const {
    uint64_t h = total_ >= 32 ? merge(merge(merge(merge(rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) +
                                                             rotl(v_[3], 18),
                                                         v_[0]),
                                                   v_[1]),
                                             v_[2]),
                                       v_[3])
                              : P5;
    h += total_;
    size_t i = 0;
    for (; i + 8 <= tail_size_; i += 8) h = rotl(h ^ round(0, read64(tail_ + i)), 27) * P1 + P4;
    if (i + 4 <= tail_size_) {
      h = rotl(h ^ (read32(tail_ + i) * P1), 23) * P2 + P3;
      i += 4;
    }
    for (; i < tail_size_; ++i) h = rotl(h ^ (tail_[i] * P5), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
  }

 private:
  uint64_t v_[4] = {P1 + P2, P2, 0, 0 - P1};
  unsigned char tail_[32];
  size_t tail_size_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

uint64_t xxh64(const void* data, size_t size) {
  Xxh64 h;
  h.update(static_cast<const unsigned char*>(data), size);
  return h.finish();
}

std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  AMBER_CHECK(in, "cannot read ", path, " to check its checksum");
  Xxh64 h;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h.update(reinterpret_cast<const unsigned char*>(buffer.data()), static_cast<size_t>(in.gcount()));
  }
  AMBER_CHECK(in.eof(), "reading ", path, " failed while computing its checksum");
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h.finish()));
  return std::string("xxh64:") + hex;
}

}  // namespace amber
