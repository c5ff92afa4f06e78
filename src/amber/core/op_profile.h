// Per-op GPU time for `amber bench step --profile`. While profiling is on, every CUDA
// op entry point brackets its launches with a pair of CUDA events (no host wait); the
// report waits once and sums the elapsed times per op name. Nested entry points count
// only in the outermost op. Off, the cost is one branch per op call.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace amber::profile {

void start();    // clears earlier records and turns profiling on
bool active();
// Milliseconds per op since start(), largest first; turns profiling off.
std::vector<std::pair<std::string, double>> report();

// Brackets one op's launches on the current stream.
class Scope {
 public:
  explicit Scope(const char* op);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool recording_ = false;
};

}  // namespace amber::profile
