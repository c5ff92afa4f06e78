// `amber bench step --twice OP`: the named op's entry point runs twice in each call
// (through the tools' op hook, bench/op_hooks.h), so that the step's time shows what
// the op costs inside it. On a GPU held at its power cap an op costs its energy, not
// its eager time: a memory-bound pass can cost more than its duration, and one the
// step already overlaps nothing (docs/perf/step.md, d4410ab). Only ops whose second
// run writes the same bits as the first take part.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace amber::profile {

// The ops --twice may name: each one's entry point asks runs() for its count.
std::span<const std::string_view> repeatable_ops();
// The same names, comma-separated, for help texts and errors.
std::string repeatable_op_list();
// Names the op to run twice from now on ("" for none); refuses an op outside
// repeatable_ops(), naming them. Clears the count of doubled calls.
void set_twice(std::string_view op);
// How many times the op `op` runs in this call: 2 for the op set_twice named, else 1.
int runs(std::string_view op);
// Whether set_twice named an op.
bool twice_op_set();
// Calls that ran twice since set_twice.
int64_t doubled_calls();

}  // namespace amber::profile
