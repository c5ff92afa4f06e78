#include "amber/gen/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "amber/core/error.h"
#include "amber/core/philox.h"

namespace amber {

void validate_sampling(const SamplingConfig& c) {
  AMBER_CHECK(c.temperature >= 0 && std::isfinite(c.temperature),
              "temperature must be a finite number >= 0 (0 = greedy), got ", c.temperature);
  AMBER_CHECK(c.top_k >= 0, "top-k must be >= 0 (0 = off), got ", c.top_k);
  AMBER_CHECK(c.top_p > 0 && c.top_p <= 1, "top-p must be in (0, 1], got ", c.top_p);
  AMBER_CHECK(c.min_p >= 0 && c.min_p < 1, "min-p must be in [0, 1), got ", c.min_p);
  AMBER_CHECK(c.repetition_penalty > 0 && std::isfinite(c.repetition_penalty),
              "repetition penalty must be a finite number > 0 (1 = off, > 1 discourages repeats), got ",
              c.repetition_penalty);
}

int32_t sample_token(const std::vector<double>& logits, const SamplingConfig& c, uint64_t draw) {
  AMBER_CHECK(!logits.empty(), "sample_token: empty logits");
  const auto argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (c.temperature == 0) return argmax;
  // Candidates sorted by probability, most likely first (ties by token id).
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  // Differences from the largest logit, then scaled: a temperature so small that a logit
  // over it overflows leaves the top token(s) at exp(0) and the rest at exp(-inf) = 0,
  // which is greedy, where logit / t - top / t would be inf - inf.
  const double top = logits[argmax];
  std::vector<double> p(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += (p[i] = std::exp((logits[order[i]] - top) / c.temperature));
  size_t keep = order.size();
  if (c.top_k > 0) keep = std::min(keep, static_cast<size_t>(c.top_k));
  if (c.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < keep; ++i) {
      mass += p[i] / sum;
      if (mass >= c.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (c.min_p > 0)
    while (keep > 1 && p[keep - 1] < c.min_p * p[0]) --keep;  // p[0] is the largest
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  const double u = philox::to_uniform(philox::bits(c.seed, draw)) * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

SeenTokens::SeenTokens(const std::vector<int32_t>& prompt, int64_t vocab) : seen_(static_cast<size_t>(vocab), false) {
  for (int32_t t : prompt) add(t);
}

void SeenTokens::add(int32_t token) {
  AMBER_CHECK(token >= 0 && static_cast<size_t>(token) < seen_.size(), "token id ", token,
              " is outside the vocabulary [0, ", seen_.size(), ")");
  if (seen_[static_cast<size_t>(token)]) return;
  seen_[static_cast<size_t>(token)] = true;
  ids_.push_back(token);
}

void SeenTokens::penalise(std::vector<double>& logits, double penalty) const {
  if (penalty == 1) return;
  for (int32_t id : ids_) {
    if (static_cast<size_t>(id) >= logits.size()) continue;
    double& x = logits[static_cast<size_t>(id)];
    x = x > 0 ? x / penalty : x * penalty;
  }
}

}  // namespace amber
