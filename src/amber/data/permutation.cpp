// A 4-round Feistel network is a bijection on [0, 4^h) for any round function; cycle
// walking (re-encrypting until the value falls below n) restricts it to [0, n) and
// stays a bijection. The domain is under 4n, so a walk averages under 4 steps.
#include "amber/data/permutation.h"

#include "amber/core/error.h"

namespace amber::data {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

double text_fraction(std::string_view text, uint64_t key) {
  return static_cast<double>(splitmix64(fnv1a64(text) ^ splitmix64(key)) >> 11) * 0x1.0p-53;
}

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n) {
  AMBER_CHECK(n > 0 && n < (1ull << 62), "permutation size ", n, " must be in [1, 2^62)");
  half_bits_ = 1;
  while ((1ull << (2 * half_bits_)) < n) ++half_bits_;
  mask_ = (1ull << half_bits_) - 1;
  uint64_t k = key;
  for (auto& rk : round_keys_) rk = k = splitmix64(k);
}

uint64_t Permutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & mask_;
  for (uint64_t rk : round_keys_) {
    const uint64_t next = left ^ (splitmix64(right ^ rk) & mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t index) const {
  uint64_t y = encrypt(index);
  while (y >= n_) y = encrypt(y);
  return y;
}

}  // namespace amber::data
