// Learning-rate schedules: linear warmup, then constant, cosine, linear or
// warmup-stable-decay (wsd) down to min_factor. Lengths in steps or as fractions of
// the run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace amber {

struct ScheduleConfig {
  std::string kind = "cosine";   // constant | cosine | linear | wsd
  int64_t warmup_steps = -1;     // -1: use warmup_fraction
  double warmup_fraction = 0.01;
  double min_factor = 0.1;       // final lr / peak lr for cosine, linear and wsd
  double decay_fraction = 0.2;   // wsd: share of the run spent decaying, at its end

  template <class Fn>
  void fields(Fn&& v) {
    v("kind", kind);
    v("warmup_steps", warmup_steps);
    v("warmup_fraction", warmup_fraction);
    v("min_factor", min_factor);
    v("decay_fraction", decay_fraction);
  }
};

// The multiplier on the peak learning rate as a function of the 0-based step, for a
// run of `total_steps`; the kind is resolved here, once.
using Schedule = std::function<double(int64_t step)>;
Schedule make_schedule(const ScheduleConfig& config, int64_t total_steps);

}  // namespace amber
