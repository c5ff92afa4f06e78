#include "bench/op_hooks.h"

#include "amber/core/op_hook.h"
#include "bench/op_profile.h"
#include "bench/op_repeat.h"

namespace amber::profile {
namespace {

class BenchHook final : public OpHook {
 public:
  void enter(const char* op, bool on_host) override { profile::enter(op, on_host); }
  void leave(bool on_host) override { profile::leave(on_host); }
  void call_repeatable(const char* op, OpWork work) override {
    for (int run = runs(op); run > 0; --run) work();
  }
};

}  // namespace

void update_hook() {
  static BenchHook hook;
  set_op_hook(active() || twice_op_set() ? &hook : nullptr);
}

}  // namespace amber::profile
