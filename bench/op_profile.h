// Per-op time for `amber bench step --profile`. While profiling is on, the tools' op
// hook (core/op_hook.h) brackets every op entry point: on a GPU its launches with a
// pair of CUDA events (no host wait; the report waits once and sums the elapsed times
// per op name), on the CPU its work with the host's steady clock. Nested entry points
// count only in the outermost op.
// Ops issued while a CUDA graph is captured become event nodes of the graph, so every
// replay records them again: the report then gives the mean of the replays sampled (or
// else the last replay), the step as the graph runs it (at a card's power cap, without
// the host's launch gaps), and drops the ops run eagerly before the capture. One
// capture per start(): the ops of every graph captured since are summed as one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace amber::profile {

// What a profile times: the GPU's ops (CUDA events) or the CPU's (the host clock);
// the other kind's ops are not recorded.
enum class Clock { gpu, host };

void start(Clock clock = Clock::gpu);  // clears earlier records and turns profiling on
bool active();
// Waits for the graph replay in flight and adds its per-op times to the report; a
// no-op unless ops were captured. Sampling every replay costs a host wait per step.
void sample_replay();
// Milliseconds per op and step, largest first; turns profiling off. Eager calls (and
// host-clock ones) since start() are summed and divided by `steps`; a captured graph's
// ops are the mean of the sampled replays, or its last replay when none was sampled.
std::vector<std::pair<std::string, double>> report(int64_t steps);

// The hook's brackets around one op's launches on the current stream, or its work on
// the host (bench/op_hooks.cpp).
void enter(const char* op, bool on_host);
void leave(bool on_host);

}  // namespace amber::profile
