// Per-op GPU time for `amber bench step --profile`. While profiling is on, the tools'
// op hook (core/op_hook.h) brackets every CUDA op entry point's launches with a pair of
// CUDA events (no host wait); the report waits once and sums the elapsed times per op
// name. Nested entry points count only in the outermost op.
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

void start();    // clears earlier records and turns profiling on
bool active();
// Waits for the graph replay in flight and adds its per-op times to the report; a
// no-op unless ops were captured. Sampling every replay costs a host wait per step.
void sample_replay();
// Milliseconds per op and step, largest first; turns profiling off. Eager calls since
// start() are summed and divided by `steps`; a captured graph's ops are the mean of the
// sampled replays, or its last replay when none was sampled.
std::vector<std::pair<std::string, double>> report(int64_t steps);

// The hook's brackets around one op's launches on the current stream (bench/op_hooks.cpp).
void enter(const char* op);
void leave();

}  // namespace amber::profile
