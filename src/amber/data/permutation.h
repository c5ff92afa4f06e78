// A keyed pseudo-random permutation of [0, n) in O(1) memory: any position of any
// epoch's shuffle is computed directly, so a loader's whole state is (seed, epoch, cursor).
#pragma once

#include <array>
#include <cstdint>

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

}  // namespace amber::data
