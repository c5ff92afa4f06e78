// A keyed pseudo-random permutation of [0, n) in O(1) memory: any position of any
// epoch's shuffle is computed directly, so a loader's whole state is (seed, epoch, cursor).
// Also the hashes the data pipeline's other keyed choices are drawn from.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace amber::data {

class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t index) const;  // index < n

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_;
  int half_bits_;
  uint64_t mask_;
  std::array<uint64_t, 4> round_keys_;
};

uint64_t splitmix64(uint64_t x);

// 64-bit FNV-1a of the bytes.
uint64_t fnv1a64(std::string_view bytes);

// A number in [0, 1) fixed by the text and the key alone (never by order or threads):
// the validation split and the mixture weights' sampling compare it with a fraction.
double text_fraction(std::string_view text, uint64_t key);

}  // namespace amber::data
