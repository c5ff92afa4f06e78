#include "bench/op_repeat.h"

#include <algorithm>
#include <array>
#include <atomic>

#include "amber/core/error.h"
#include "bench/op_hooks.h"

namespace amber::profile {
namespace {

constexpr std::array<std::string_view, 5> kRepeatable = {"gemm", "attention_forward", "glu_linear_forward",
                                                         "glu_linear_backward_input", "rmsnorm_forward"};

struct Twice {
  std::string op;
  std::atomic<int64_t> doubled{0};
};

Twice& twice() {
  static Twice t;
  return t;
}

}  // namespace

std::span<const std::string_view> repeatable_ops() { return kRepeatable; }

std::string repeatable_op_list() {
  std::string names;
  for (const std::string_view name : kRepeatable) names += (names.empty() ? "" : ", ") + std::string(name);
  return names;
}

void set_twice(std::string_view op) {
  if (!op.empty() && std::find(kRepeatable.begin(), kRepeatable.end(), op) == kRepeatable.end())
    fail("--twice: '", op, "' cannot run twice (its second run would not write the same bits, or it is not an op); "
         "choose one of ", repeatable_op_list());
  twice().op = op;
  twice().doubled = 0;
  update_hook();
}

int runs(std::string_view op) {
  Twice& t = twice();
  if (t.op.empty() || op != t.op) return 1;
  ++t.doubled;
  return 2;
}

bool twice_op_set() { return !twice().op.empty(); }

int64_t doubled_calls() { return twice().doubled; }

}  // namespace amber::profile
