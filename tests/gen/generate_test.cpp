#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "amber/gen/generate.h"
#include "amber/gen/text_stream.h"
#include "ops/testing.h"
#include "tiny_model.h"

namespace amber {
namespace {

// The tiny model at half width, with every attention variant the cache must serve.
ModelConfig tiny() {
  ModelConfig c = testing::tiny_model();
  c.vocab_size = 23;
  c.dim = 16;
  c.mlp_hidden = 24;
  c.init_std = 0.3;
  c.attn_sink = true;
  c.sliding_window = 3;
  return c;
}

// Step-by-step cached inference must give the logits of a full forward over the
// whole sequence at every position.
TEST(Generation, CachedLogitsEqualFullForward) {
  LanguageModel model(tiny(), DType::f64);
  model.init_weights(3);
  const std::vector<std::vector<int32_t>> seqs = {{1, 5, 7, 2, 9, 11, 4}, {3, 3, 8, 1, 6}};
  std::vector<LayerCache> cache = model.make_kv_cache(2, 8);
  // Prefill three and two tokens, then decode one token per sequence at a time.
  std::vector<int32_t> starts = {0, 0}, counts = {3, 2};
  while (starts[1] + counts[1] <= 5) {
    const CachedStep step = CachedStep::packed(counts, starts, Device::cpu());
    std::vector<int32_t> tokens;
    for (int s = 0; s < 2; ++s)
      for (int j = 0; j < counts[s]; ++j) tokens.push_back(seqs[s][starts[s] + j]);
    const Tensor got = model.infer_last_logits(Tensor::from_vector(tokens, {static_cast<int64_t>(tokens.size())}),
                                               step, cache);
    for (int s = 0; s < 2; ++s) {
      const int32_t length = starts[s] + counts[s];
      const std::vector<int32_t> prefix(seqs[s].begin(), seqs[s].begin() + length);
      const Tensor full = model.logits(Tensor::from_vector(prefix, {length}), SeqInfo::from_lengths({length}));
      const Tensor want = full.slice(0, length - 1, length).contiguous().view({full.size(1)});
      const Tensor have = got.select(0, s).contiguous();
      EXPECT_LT(testing::relative_error(have, want), 1e-12) << "sequence " << s << " length " << length;
    }
    for (int s = 0; s < 2; ++s) {
      starts[s] += counts[s];
      counts[s] = 1;
    }
  }
}

TEST(Sampler, GreedyFiltersAndDistribution) {
  const std::vector<double> logits = {0.5, 2.0, -1.0, 1.0, 1.9};
  SamplingConfig greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_token(logits, greedy, 0), 1);
  SamplingConfig k1;
  k1.top_k = 1;
  SamplingConfig p_small;
  p_small.top_p = 0.1;
  SamplingConfig min_p;
  min_p.min_p = 0.5;  // keeps tokens 1 and 4 only (exp(-0.1) > 0.5 > exp(-1))
  int counts[5] = {};
  for (uint64_t d = 0; d < 4000; ++d) {
    EXPECT_EQ(sample_token(logits, k1, d), 1);
    EXPECT_EQ(sample_token(logits, p_small, d), 1);
    const int32_t t = sample_token(logits, min_p, d);
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
  SamplingConfig plain;
  plain.seed = 9;
  const int draws = 40000;
  for (uint64_t d = 0; d < draws; ++d) ++counts[sample_token(logits, plain, d)];
  double z = 0;
  for (double l : logits) z += std::exp(l);
  for (int i = 0; i < 5; ++i) {
    const double expected = std::exp(logits[i]) / z;
    EXPECT_NEAR(counts[i] / static_cast<double>(draws), expected, 4 * std::sqrt(expected / draws) + 1e-3) << i;
  }
  SamplingConfig bad;
  bad.top_p = 0;
  EXPECT_THROW(validate_sampling(bad), Error);
}

TEST(Generation, SeededBatchIsReproducibleAndStopsAtEos) {
  LanguageModel model(tiny());
  model.init_weights(4);
  GenerationConfig g;
  g.max_new_tokens = 12;
  g.sampling.seed = 5;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4}, {5, 6}};
  const auto a = generate(model, prompts, g).tokens, b = generate(model, prompts, g).tokens;
  EXPECT_EQ(a, b);
  for (const auto& seq : a) EXPECT_EQ(seq.size(), 12u);
  g.eos_id = a[0][2];
  const auto stopped = generate(model, prompts, g).tokens;
  EXPECT_LE(stopped[0].size(), 3u);
  EXPECT_EQ(stopped[0].back(), g.eos_id);
  EXPECT_THROW(generate(model, {{}}, g), Error);
}

// A vocabulary padded past the tokenizer's size: vocab_limit keeps every sampled id
// below the limit, where without it the same draws reach past it.
TEST(Generation, VocabLimitKeepsSampledIdsBelowIt) {
  LanguageModel model(tiny());
  model.init_weights(6);
  GenerationConfig g;
  g.max_new_tokens = 40;
  g.sampling.seed = 9;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2}, {3}};
  const auto highest = [](const std::vector<std::vector<int32_t>>& out) {
    int32_t m = 0;
    for (const auto& seq : out) m = std::max(m, *std::max_element(seq.begin(), seq.end()));
    return m;
  };
  ASSERT_GE(highest(generate(model, prompts, g).tokens), 8) << "the unlimited draws never pass the limit";
  g.vocab_limit = 8;
  EXPECT_LT(highest(generate(model, prompts, g).tokens), 8);
  g.vocab_limit = 24;  // past the model's 23 ids
  EXPECT_THROW(generate(model, prompts, g), Error);
}

// On a large vocabulary (where only the most likely tokens are sorted) every draw lands
// in the set each filter's definition keeps: the top-k, the smallest most-likely-first
// prefix holding top-p of the mass, the tokens with p >= min_p p_max; and every token of
// a small kept set is drawn, about as often as its share of the kept mass.
TEST(Sampler, FiltersKeepWhatTheirDefinitionsKeepOnALargeVocabulary) {
  const int64_t vocab = 6000;
  const std::vector<double> logits = testing::random_tensor({vocab}, DType::f64, 77, 2.5f).to_doubles();
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += (p[i] = std::exp(logits[i] - logits[order[0]]));
  const auto prefix_for_mass = [&](double top_p) {
    double mass = 0;
    for (size_t i = 0; i < order.size(); ++i)
      if ((mass += p[order[i]] / sum) >= top_p) return i + 1;
    return order.size();
  };
  struct Case {
    int top_k;
    double top_p, min_p;
  };
  for (const Case& f : {Case{50, 1.0, 0.0}, Case{0, 0.5, 0.0}, Case{0, 0.99, 0.0}, Case{300, 0.9, 0.0},
                        Case{0, 1.0, 0.05}, Case{0, 0.999, 0.01}}) {
    SamplingConfig c;
    c.top_k = f.top_k;
    c.top_p = f.top_p;
    c.min_p = f.min_p;
    c.seed = 3;
    size_t keep = f.top_k > 0 ? static_cast<size_t>(f.top_k) : order.size();
    if (f.top_p < 1) keep = std::min(keep, prefix_for_mass(f.top_p));
    std::vector<bool> allowed(p.size(), false);
    double kept_mass = 0;
    for (size_t i = 0; i < keep; ++i)
      if (p[order[i]] >= f.min_p) allowed[order[i]] = true, kept_mass += p[order[i]];
    int top_hits = 0;
    const int draws = 1500;
    for (uint64_t d = 0; d < draws; ++d) {
      const int32_t t = sample_token(logits, c, d);
      ASSERT_TRUE(allowed[t]) << "top_k " << f.top_k << " top_p " << f.top_p << " min_p " << f.min_p << ": token "
                              << t << " is outside the kept set";
      top_hits += t == order[0];
    }
    const double share = p[order[0]] / kept_mass;
    EXPECT_NEAR(top_hits / static_cast<double>(draws), share, 4 * std::sqrt(share / draws) + 1e-3) << f.top_p;
  }
}

// A temperature so small that the logits over it overflow is greedy: every draw takes
// the most likely token, as temperature 0 does. A temperature that is not finite is refused.
TEST(Sampler, UnderflowingTemperatureActsAsGreedy) {
  const std::vector<double> logits = {0.5, 2.0, -1.0, 1.0, 1.9};
  for (const double t : {1e-300, 1e-310, 4.9e-324}) {
    SamplingConfig c;
    c.temperature = t;
    for (uint64_t d = 0; d < 200; ++d) ASSERT_EQ(sample_token(logits, c, d), 1) << "temperature " << t;
  }
  SamplingConfig infinite;
  infinite.temperature = std::numeric_limits<double>::infinity();
  EXPECT_THROW(validate_sampling(infinite), Error);
}

// A prompt that with its new tokens would run past model.max_position is refused,
// naming the prompt and the context, before any token is generated.
TEST(Generation, PromptPastTheContextIsRefused) {
  ModelConfig c = tiny();
  c.max_position = 8;
  LanguageModel model(c);
  model.init_weights(2);
  GenerationConfig g;
  g.max_new_tokens = 3;
  EXPECT_EQ(generate(model, {{1, 2, 3, 4, 5}}, g).tokens[0].size(), 3u);  // exactly fills the context
  try {
    generate(model, {{1, 2}, {1, 2, 3, 4, 5, 6}}, g);
    FAIL() << "a prompt past the context must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 2 has 6 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.max_position"), std::string::npos) << e.what();
  }
}

// The callback sees every emitted token in sequence order, and ends a sequence where it
// returns false; the others run on to max_new_tokens.
TEST(Generation, OnTokenEndsOneSequence) {
  LanguageModel model(tiny());
  model.init_weights(4);
  GenerationConfig g;
  g.max_new_tokens = 10;
  g.sampling.seed = 3;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4}, {5, 6}};
  const Generation plain = generate(model, prompts, g);
  std::vector<std::vector<int32_t>> seen(3);
  int last_sequence = -1;
  g.on_token = [&](int sequence, int32_t token) {
    EXPECT_TRUE(sequence > last_sequence || sequence == 0) << "tokens of one step arrive in sequence order";
    last_sequence = sequence;
    seen[static_cast<size_t>(sequence)].push_back(token);
    return !(sequence == 1 && seen[1].size() == 4);
  };
  const Generation cut = generate(model, prompts, g);
  EXPECT_EQ(cut.tokens, seen);
  EXPECT_EQ(cut.tokens[1], std::vector<int32_t>(plain.tokens[1].begin(), plain.tokens[1].begin() + 4));
  EXPECT_EQ(cut.tokens[0], plain.tokens[0]);  // the other sequences are untouched by the cut
  EXPECT_EQ(cut.tokens[2], plain.tokens[2]);
  EXPECT_EQ(cut.decode_steps, g.max_new_tokens - 1);
}

TEST(Sampler, RepetitionPenaltyScalesSeenLogitsTowardsUnlikely) {
  SeenTokens seen({0, 1, 1}, 6);
  seen.add(5);  // past the candidates below: skipped
  std::vector<double> logits = {2.0, -1.0, 0.5, 3.0};
  seen.penalise(logits, 2.0);
  EXPECT_EQ(logits, (std::vector<double>{1.0, -2.0, 0.5, 3.0}));
  seen.penalise(logits, 1.0);
  EXPECT_EQ(logits, (std::vector<double>{1.0, -2.0, 0.5, 3.0}));
  EXPECT_THROW(seen.add(6), Error);
  SamplingConfig bad;
  bad.repetition_penalty = 0;
  EXPECT_THROW(validate_sampling(bad), Error);
  // Greedy with a strong penalty: every new token differs from the prompt's and from
  // the ones before it while unseen tokens with positive logits remain.
  LanguageModel model(tiny());
  model.init_weights(8);
  GenerationConfig g;
  g.max_new_tokens = 6;
  g.sampling.temperature = 0;
  g.sampling.repetition_penalty = 1e9;
  const std::vector<int32_t> prompt = {1, 2};
  const auto repeats = [&] {
    const Generation out = generate(model, {prompt}, g);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.tokens[0].begin(), out.tokens[0].end());
    std::sort(all.begin(), all.end());
    return std::unique(all.begin(), all.end()) != all.end();
  };
  EXPECT_FALSE(repeats()) << "a token repeated under the penalty";
  g.sampling.repetition_penalty = 1;
  EXPECT_TRUE(repeats()) << "without the penalty this greedy run repeats (else the check above proves nothing)";
}

TEST(TextStream, HoldsHalfCharactersAndPossibleStopStrings) {
  TextStream t({"END", "\n\n"});
  EXPECT_TRUE(t.update("a\xC3"));  // the first byte of U+00E9
  EXPECT_EQ(t.take(), "a");
  EXPECT_TRUE(t.update("a\xC3\xA9 E"));
  EXPECT_EQ(t.take(), "\xC3\xA9 ");  // "E" may begin "END"
  EXPECT_TRUE(t.update("a\xC3\xA9 EX\n"));
  EXPECT_EQ(t.take(), "EX");
  EXPECT_FALSE(t.update("a\xC3\xA9 EX\n\nmore"));
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.text(), "a\xC3\xA9 EX");
  EXPECT_EQ(t.take(), "");  // the held newline belonged to the stop string
  EXPECT_FALSE(t.update("anything"));
  EXPECT_EQ(t.text(), "a\xC3\xA9 EX");
  // A four-byte character over three updates, then a sequence that ends mid-character.
  TextStream u;
  u.update("\xF0\x9F");
  EXPECT_EQ(u.take(), "");
  u.update("\xF0\x9F\x98");
  EXPECT_EQ(u.take(), "");
  u.update("\xF0\x9F\x98\x80\xE2\x82");
  EXPECT_EQ(u.take(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(u.take_rest(), "\xE2\x82");
  EXPECT_EQ(incomplete_utf8_tail("ab\x80"), 0u);  // a stray continuation byte completes nothing
  EXPECT_EQ(incomplete_utf8_tail("ab\xE2"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("\xC3\xA9"), 0u);
  EXPECT_THROW(TextStream({""}), Error);
}

}  // namespace
}  // namespace amber
