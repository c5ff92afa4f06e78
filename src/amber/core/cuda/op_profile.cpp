#include "amber/core/op_profile.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>

namespace amber::profile {
namespace {

struct Record {
  const char* op;
  cudaEvent_t begin, end;
};

struct State {
  bool on = false;
  int depth = 0;
  std::vector<Record> records;
  std::vector<cudaEvent_t> spare;  // events of earlier reports, reused
};

State& state() {
  static State s;
  return s;
}

cudaEvent_t take_event() {
  State& s = state();
  if (!s.spare.empty()) {
    const cudaEvent_t e = s.spare.back();
    s.spare.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cudaEventCreate(&e);
  return e;
}

}  // namespace

void start() {
  report();
  state().on = true;
}

bool active() { return state().on; }

std::vector<std::pair<std::string, double>> report() {
  State& s = state();
  s.on = false;
  cudaDeviceSynchronize();
  std::map<std::string, double> total;
  for (const Record& r : s.records) {
    float ms = 0;
    cudaEventElapsedTime(&ms, r.begin, r.end);
    total[r.op] += ms;
    s.spare.push_back(r.begin);
    s.spare.push_back(r.end);
  }
  s.records.clear();
  std::vector<std::pair<std::string, double>> out(total.begin(), total.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

Scope::Scope(const char* op) {
  State& s = state();
  if (!s.on || s.depth++ > 0) return;
  recording_ = true;
  s.records.push_back({op, take_event(), take_event()});
  cudaEventRecord(s.records.back().begin, cudaStreamPerThread);
}

Scope::~Scope() {
  State& s = state();
  if (!s.on) return;
  --s.depth;
  if (recording_) cudaEventRecord(s.records.back().end, cudaStreamPerThread);
}

}  // namespace amber::profile
