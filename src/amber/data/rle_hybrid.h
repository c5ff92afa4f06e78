// Parquet's RLE/bit-packed hybrid encoding, which stores definition levels and
// dictionary indices: runs of one repeated value and runs of values packed at a fixed
// bit width, decoded one value at a time so a page's claimed count costs no memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace amber::data {

class RleHybridDecoder {
 public:
  // `bytes`: the runs, without any length prefix; `bit_width` in [0, 32]; `what` names
  // the data in error messages ("page 3 of column text in data.parquet").
  RleHybridDecoder(std::span<const uint8_t> bytes, int bit_width, std::string what);

  // The next value; fails, naming `what`, when the runs end first.
  uint32_t next();
  // How many more copies of the value next() would return follow it in the same
  // repeated run (0 inside a packed run): lets a caller pass over a run of nulls at once.
  uint64_t repeats_left() const { return rle_ ? left_ : 0; }
  // Skips `n` values of the current repeated run (n <= repeats_left()).
  void skip_repeats(uint64_t n) { left_ -= n; }

 private:
  void next_run();

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  int bit_width_;
  std::string what_;
  bool rle_ = false;
  uint64_t left_ = 0;        // values left in the current run
  uint32_t value_ = 0;       // a repeated run's value
  size_t packed_start_ = 0;  // a packed run's first byte
  uint64_t packed_index_ = 0;  // its next value's index
  uint64_t packed_usable_ = 0;  // how many of its values its bytes hold (the last run may be cut short)
};

}  // namespace amber::data
