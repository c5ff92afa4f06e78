#include "amber/train/schedule.h"

#include <algorithm>
#include <cmath>

#include "amber/core/error.h"

namespace amber {

Schedule make_schedule(const ScheduleConfig& c, int64_t total) {
  AMBER_CHECK(c.warmup_fraction >= 0 && c.warmup_fraction < 1, "schedule.warmup_fraction must be in [0, 1)");
  AMBER_CHECK(c.min_factor >= 0 && c.min_factor <= 1, "schedule.min_factor must be in [0, 1]");
  AMBER_CHECK(c.decay_fraction > 0 && c.decay_fraction <= 1, "schedule.decay_fraction must be in (0, 1]");
  AMBER_CHECK(total > 0, "a schedule needs a positive number of steps, got ", total);
  const int64_t warmup = c.warmup_steps >= 0 ? c.warmup_steps
                                             : static_cast<int64_t>(std::llround(c.warmup_fraction * total));
  const double span = static_cast<double>(std::max<int64_t>(total - warmup, 1));
  const double floor = c.min_factor, decay = c.decay_fraction;
  std::function<double(double)> after_warmup;  // of progress in [0, 1]
  if (c.kind == "constant") {
    after_warmup = [](double) { return 1.0; };
  } else if (c.kind == "cosine") {
    after_warmup = [floor](double p) { return floor + (1 - floor) * 0.5 * (1 + std::cos(M_PI * p)); };
  } else if (c.kind == "linear") {
    after_warmup = [floor](double p) { return 1.0 - (1 - floor) * p; };
  } else if (c.kind == "wsd") {
    // Stable, then a linear decay over the last decay_fraction of the run.
    after_warmup = [floor, decay](double p) {
      return p <= 1.0 - decay ? 1.0 : 1.0 - (1 - floor) * (p - (1.0 - decay)) / decay;
    };
  } else {
    fail("schedule.kind '", c.kind, "' is not one of: constant, cosine, linear, wsd");
  }
  return [warmup, span, after_warmup](int64_t step) {
    if (step < warmup) return static_cast<double>(step + 1) / static_cast<double>(warmup);
    return after_warmup(std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0));
  };
}

}  // namespace amber
