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

namespace {

// The tokens of `ids` that a top-p cut can keep: those at or above the largest power of
// two 2^-k (p <= 1 here) under which lies at most `discard` of their mass. With discard
// half the mass the cut leaves out, roundoff in its prefix sums cannot reach past them,
// so only these need sorting: few, for a peaked distribution over a large vocabulary.
std::vector<int32_t> nucleus_candidates(const std::vector<double>& p, const std::vector<int32_t>& ids,
                                        double discard) {
  constexpr int kBuckets = 64;  // bucket e: p in [2^-e, 2^(1-e)); the last also holds smaller p
  const auto bucket = [](double x) { return x > 0 ? std::min(kBuckets - 1, -std::ilogb(x)) : kBuckets - 1; };
  double mass[kBuckets] = {};
  for (int32_t i : ids) mass[bucket(p[static_cast<size_t>(i)])] += p[static_cast<size_t>(i)];
  int last = kBuckets - 1;  // keep buckets 0..last
  double below = 0;
  while (last > 0 && below + mass[last] <= discard) below += mass[last--];
  std::vector<int32_t> out;
  for (int32_t i : ids)
    if (bucket(p[static_cast<size_t>(i)]) <= last) out.push_back(i);
  return out;
}

}  // namespace

int32_t sample_token(const std::vector<double>& logits, const SamplingConfig& c, uint64_t draw) {
  AMBER_CHECK(!logits.empty(), "sample_token: empty logits");
  const auto argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (c.temperature == 0) return argmax;
  const size_t n = logits.size();
  // Differences from the largest logit, then scaled: a temperature so small that a logit
  // over it overflows leaves the top token(s) at exp(0) and the rest at exp(-inf) = 0,
  // which is greedy, where logit / t - top / t would be inf - inf.
  const double top = logits[static_cast<size_t>(argmax)];
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (p[i] = std::exp((logits[i] - top) / c.temperature));
  // Which tokens the filters keep: top-k and top-p look at the most likely tokens first
  // (ties to the lower id).
  std::vector<uint8_t> kept(n, 1);
  if (c.top_k > 0 || c.top_p < 1) {
    const auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (c.top_k > 0 && static_cast<size_t>(c.top_k) < n) {
      std::nth_element(order.begin(), order.begin() + c.top_k - 1, order.end(), before);
      order.resize(static_cast<size_t>(c.top_k));
    }
    // The length of the most-likely-first prefix of `sorted` holding top-p of the mass,
    // or 0 when the whole of it holds less.
    const auto nucleus = [&](const std::vector<int32_t>& sorted) -> size_t {
      double mass = 0;
      for (size_t i = 0; i < sorted.size(); ++i)
        if ((mass += p[static_cast<size_t>(sorted[i])] / sum) >= c.top_p) return i + 1;
      return 0;
    };
    std::vector<int32_t> sorted = c.top_p < 1 ? nucleus_candidates(p, order, (1 - c.top_p) * sum / 2) : order;
    std::sort(sorted.begin(), sorted.end(), before);
    size_t keep = c.top_p < 1 ? nucleus(sorted) : sorted.size();
    if (keep == 0 && sorted.size() < order.size()) {  // never, short of roundoff: every candidate counts
      std::sort(order.begin(), order.end(), before);
      sorted = order;
      keep = nucleus(sorted);
    }
    if (keep == 0) keep = sorted.size();
    std::fill(kept.begin(), kept.end(), 0);
    for (size_t i = 0; i < keep; ++i) kept[static_cast<size_t>(sorted[i])] = 1;
  }
  // min-p against the most likely token's p = exp(0) = 1, which it always keeps.
  if (c.min_p > 0)
    for (size_t i = 0; i < n; ++i) kept[i] = kept[i] && p[i] >= c.min_p;
  // One draw over the kept tokens' mass, walked in id order.
  double kept_mass = 0;
  for (size_t i = 0; i < n; ++i)
    if (kept[i]) kept_mass += p[i];
  const double u = philox::to_uniform(philox::bits(c.seed, draw)) * kept_mass;
  double acc = 0;
  int32_t last = argmax;
  for (size_t i = 0; i < n; ++i) {
    if (!kept[i]) continue;
    acc += p[i];
    last = static_cast<int32_t>(i);
    if (u < acc) return last;
  }
  return last;
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
