#include "bench/op_profile.h"

#include <algorithm>
#include <map>

#include "bench/op_hooks.h"

#include <chrono>
#include <string>

#ifdef AMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "amber/core/stream.h"

// CUDA events: the GPU half of the profiler.
namespace amber::profile {
namespace {

struct Record {
  const char* op;
  cudaEvent_t begin, end;
  bool in_graph;  // event nodes of a captured graph: its last replay's times
};

struct State {
  bool on = false;
  int depth = 0;
  std::vector<Record> records;
  std::vector<cudaEvent_t> spare;  // events of earlier reports, reused
  // Events that are nodes of a captured graph stay the graph's: it may replay after the
  // report, so they are never reused (a few hundred a capture).
  std::vector<cudaEvent_t> held;
  // Per-op sums over the replays sampled since start(), and their count.
  std::map<std::string, double> sampled;
  int64_t samples = 0;
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

// While a graph is captured, a plain record only orders streams; an external one
// becomes a node that records the event at every replay.
void record(cudaEvent_t e, bool in_graph) {
  if (in_graph)
    cudaEventRecordWithFlags(e, cuda::current_stream(), cudaEventRecordExternal);
  else
    cudaEventRecord(e, cuda::current_stream());
}

bool captured(const std::vector<Record>& records) {
  return std::any_of(records.begin(), records.end(), [](const Record& r) { return r.in_graph; });
}

// Milliseconds per op of the last replay of the captured records.
std::map<std::string, double> last_replay(const std::vector<Record>& records) {
  std::map<std::string, double> ms;
  for (const Record& r : records) {
    if (!r.in_graph) continue;
    float elapsed = 0;
    cudaEventElapsedTime(&elapsed, r.begin, r.end);
    ms[r.op] += elapsed;
  }
  return ms;
}

}  // namespace

void sample_replay() {
  State& s = state();
  if (!captured(s.records)) return;
  cudaStreamSynchronize(cuda::current_stream());
  for (const auto& [op, ms] : last_replay(s.records)) s.sampled[op] += ms;
  ++s.samples;
}

static std::map<std::string, double> gpu_report(int64_t steps) {
  State& s = state();
  s.on = false;
  cudaDeviceSynchronize();
  const bool graph = captured(s.records);
  std::map<std::string, double> total;
  if (graph && s.samples > 0) {
    for (const auto& [op, ms] : s.sampled) total[op] = ms / static_cast<double>(s.samples);
  } else if (graph) {
    total = last_replay(s.records);
  }
  for (const Record& r : s.records) {
    if (!graph) {
      float ms = 0;
      cudaEventElapsedTime(&ms, r.begin, r.end);
      total[r.op] += ms / static_cast<double>(steps);
    }
    auto& pool = r.in_graph ? s.held : s.spare;
    pool.push_back(r.begin);
    pool.push_back(r.end);
  }
  s.records.clear();
  s.sampled.clear();
  s.samples = 0;
  return total;
}

static void gpu_start() {
  gpu_report(1);
  state().on = true;
}

static void gpu_enter(const char* op) {
  State& s = state();
  if (!s.on || s.depth++ > 0) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(cuda::current_stream(), &capture);
  s.records.push_back({op, take_event(), take_event(), capture == cudaStreamCaptureStatusActive});
  record(s.records.back().begin, s.records.back().in_graph);
}

static void gpu_leave() {
  State& s = state();
  if (!s.on) return;
  if (--s.depth == 0) record(s.records.back().end, s.records.back().in_graph);
}

}  // namespace amber::profile

#else  // CPU-only builds: GPU profiles record nothing.

namespace amber::profile {

static void gpu_start() {}
void sample_replay() {}
static std::map<std::string, double> gpu_report(int64_t) { return {}; }
static void gpu_enter(const char*) {}
static void gpu_leave() {}

}  // namespace amber::profile
#endif

namespace amber::profile {
namespace {

using HostClock = std::chrono::steady_clock;

// The host clock's records: the outermost op's name and start, and the sums per name.
struct Host {
  int depth = 0;
  const char* op = nullptr;
  HostClock::time_point begin;
  std::map<std::string, double> ms;
};

struct Profile {
  bool on = false;
  Clock clock = Clock::gpu;
  Host host;
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

void start(Clock clock) {
  report(1);
  Profile& p = profile();
  p.on = true;
  p.clock = clock;
  p.host = {};
  if (clock == Clock::gpu) gpu_start();
  update_hook();
}

bool active() { return profile().on; }

std::vector<std::pair<std::string, double>> report(int64_t steps) {
  Profile& p = profile();
  const bool was_on = p.on;
  p.on = false;
  update_hook();
  std::map<std::string, double> total;
  if (p.clock == Clock::gpu) {
    total = gpu_report(steps);
  } else if (was_on) {
    for (const auto& [op, ms] : p.host.ms) total[op] = ms / static_cast<double>(steps);
  }
  p.host = {};
  std::vector<std::pair<std::string, double>> out(total.begin(), total.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

void enter(const char* op, bool on_host) {
  Profile& p = profile();
  if (!p.on || on_host != (p.clock == Clock::host)) return;
  if (!on_host) return gpu_enter(op);
  if (p.host.depth++ > 0) return;
  p.host.op = op;
  p.host.begin = HostClock::now();
}

void leave(bool on_host) {
  Profile& p = profile();
  if (!p.on || on_host != (p.clock == Clock::host)) return;
  if (!on_host) return gpu_leave();
  if (--p.host.depth == 0)
    p.host.ms[p.host.op] += std::chrono::duration<double, std::milli>(HostClock::now() - p.host.begin).count();
}

}  // namespace amber::profile
