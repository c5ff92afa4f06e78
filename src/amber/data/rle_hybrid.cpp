// A run starts with a varint header: its low bit 0 is a repeated run of header >> 1
// copies of one value stored in ceil(bit_width / 8) little-endian bytes; 1 is a packed
// run of (header >> 1) * 8 values, bit_width bits each, least significant bit first.
#include "amber/data/rle_hybrid.h"

#include <algorithm>

#include "amber/core/error.h"

namespace amber::data {

RleHybridDecoder::RleHybridDecoder(std::span<const uint8_t> bytes, int bit_width, std::string what)
    : bytes_(bytes), bit_width_(bit_width), what_(std::move(what)) {
  AMBER_CHECK(bit_width >= 0 && bit_width <= 32, what_, " is damaged: a bit width of ", bit_width,
              " (at most 32); the file is corrupt");
}

void RleHybridDecoder::next_run() {
  uint64_t header = 0;
  for (int shift = 0;; shift += 7) {
    AMBER_CHECK(pos_ < bytes_.size(), what_, " is damaged: its levels or indices end before its values do; ",
                "the file is truncated or corrupt");
    AMBER_CHECK(shift < 64, what_, " is damaged: a run header longer than 10 bytes");
    const uint8_t b = bytes_[pos_++];
    header |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  const uint64_t count = header >> 1;
  AMBER_CHECK(count > 0, what_, " is damaged: an empty run");
  if (header & 1) {
    rle_ = false;
    AMBER_CHECK(count <= (uint64_t{1} << 40), what_, " is damaged: a packed run of ", count, " groups");
    left_ = count * 8;
    packed_start_ = pos_;
    packed_index_ = 0;
    const uint64_t run_bytes = count * static_cast<uint64_t>(bit_width_);
    const uint64_t have = std::min<uint64_t>(run_bytes, bytes_.size() - pos_);
    packed_usable_ = bit_width_ == 0 ? left_ : have * 8 / static_cast<uint64_t>(bit_width_);
    pos_ += have;
  } else {
    rle_ = true;
    left_ = count;
    const size_t width_bytes = (static_cast<size_t>(bit_width_) + 7) / 8;
    AMBER_CHECK(bytes_.size() - pos_ >= width_bytes, what_, " is damaged: a run's value is cut off; the file is ",
                "truncated or corrupt");
    value_ = 0;
    for (size_t i = 0; i < width_bytes; ++i) value_ |= static_cast<uint32_t>(bytes_[pos_ + i]) << (8 * i);
    pos_ += width_bytes;
    AMBER_CHECK(bit_width_ == 32 || value_ >> bit_width_ == 0, what_, " is damaged: a run's value ", value_,
                " is wider than ", bit_width_, " bits");
  }
}

uint32_t RleHybridDecoder::next() {
  if (left_ == 0) next_run();
  --left_;
  if (rle_) return value_;
  AMBER_CHECK(packed_index_ < packed_usable_, what_, " is damaged: a packed run is cut off; the file is truncated ",
              "or corrupt");
  const uint64_t bit = packed_index_ * static_cast<uint64_t>(bit_width_);
  ++packed_index_;
  uint64_t v = 0;
  const size_t first = packed_start_ + bit / 8;
  const size_t last = packed_start_ + (bit + bit_width_ + 7) / 8;  // one past the last byte holding the value
  for (size_t i = first; i < last; ++i) v |= static_cast<uint64_t>(bytes_[i]) << (8 * (i - first));
  v >>= bit % 8;
  return static_cast<uint32_t>(bit_width_ == 32 ? v : v & ((uint64_t{1} << bit_width_) - 1));
}

}  // namespace amber::data
