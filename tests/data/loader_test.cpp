// Loader tests on synthetic shards whose tokens are a running counter, so every token
// names its document position: coverage per epoch, targets inside documents only,
// seeding, resume from a saved state, and the split of each step across processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>

#include "amber/data/loader.h"
#include "amber/data/permutation.h"
#include "data/testing.h"

namespace amber::data {
namespace {

constexpr int32_t kBos = 65534, kEos = 65535;

// Two shards, 150 documents of 0..180 tokens; tokens count up from 0 across documents.
struct Dataset {
  testing::TempDir dir;
  std::vector<std::string> shards;
  std::vector<int64_t> doc_lengths;
  int64_t tokens = 0;
  Dataset() {
    for (int s = 0; s < 2; ++s) {
      std::vector<int32_t> toks;
      std::vector<uint64_t> offsets{0};
      for (int d = 0; d < 75; ++d) {
        const int64_t len = d % 25 == 24 ? 0 : 1 + (d * 37 + s * 11) % 180;  // a few empty documents
        for (int64_t i = 0; i < len; ++i) toks.push_back(static_cast<int32_t>(tokens++));
        offsets.push_back(toks.size());
        doc_lengths.push_back(len);
      }
      shards.push_back(dir.file("train-0000" + std::to_string(s) + ".bin"));
      write_shard(shards.back(), toks, offsets, 65536);
    }
  }
  LoaderConfig config(uint64_t seed = 7) const {
    LoaderConfig c;
    c.shards = shards;
    c.token_budget = 512;
    c.max_seq_len = 128;
    c.seed = seed;
    return c;
  }
};

std::vector<int32_t> ints(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

// Checks one batch's invariants; returns its tokens.
std::vector<int32_t> check_batch(const Batch& b, const LoaderConfig& c) {
  const std::vector<int32_t> tok = ints(b.tokens), tgt = ints(b.targets);
  EXPECT_LE(static_cast<int64_t>(tok.size()), c.token_budget);
  EXPECT_EQ(b.seq.total_tokens, static_cast<int64_t>(tok.size()));
  EXPECT_LE(b.seq.max_seqlen, c.max_seq_len);
  int64_t trained = 0;
  for (int d = 0; d < b.seq.num_docs; ++d) {
    const int32_t start = b.seq.doc_start(d), end = start + b.seq.doc_length(d);
    for (int32_t i = start; i < end; ++i) {
      EXPECT_EQ(b.seq.positions.data<int32_t>()[i], i - start);
      if (i + 1 < end) {
        EXPECT_EQ(tgt[i], tok[i + 1]) << "target must be the next token of the same document";
        ++trained;
      } else {
        EXPECT_EQ(tgt[i], kNoTarget) << "the last token of a document has no target";
      }
      // Within a document the counter steps by one (bos/eos aside): nothing was mixed in.
      if (i + 1 < end && tok[i] != kBos && tok[i + 1] != kEos) {
        EXPECT_EQ(tok[i + 1], tok[i] + 1);
      }
    }
  }
  EXPECT_EQ(b.trained_tokens, trained);
  return tok;
}

TEST(Permutation, IsABijectionForAnySize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 17ull, 1000ull, 4097ull}) {
    const Permutation p(n, 99);
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(p(i));
    EXPECT_EQ(seen.size(), n);
    EXPECT_LT(*seen.rbegin(), n);
  }
  const Permutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  EXPECT_LT(same, 20) << "different keys must give different orders";
}

TEST(Loader, EveryTokenOncePerEpochAndTargetsStayInsideDocuments) {
  Dataset data;
  const LoaderConfig c = data.config();
  Loader loader(c);
  int64_t expected_chunks = 0;
  for (int64_t len : data.doc_lengths) expected_chunks += (len + 127) / 128;
  EXPECT_EQ(loader.num_chunks(), expected_chunks);
  EXPECT_EQ(loader.tokens_per_epoch(), data.tokens);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int32_t> seen;
    int batches = 0;
    while (loader.state().epoch == epoch) {
      const std::vector<int32_t> tok = check_batch(loader.next(), c);
      seen.insert(seen.end(), tok.begin(), tok.end());
      ++batches;
    }
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(static_cast<int64_t>(seen.size()), data.tokens) << "epoch " << epoch;
    for (int64_t i = 0; i < data.tokens; ++i) ASSERT_EQ(seen[i], i) << "epoch " << epoch;
    // Greedy packing wastes less than one chunk per batch.
    EXPECT_LE(batches, data.tokens / (c.token_budget - c.max_seq_len) + 1);
  }
}

TEST(Loader, BosAndEosWrapEveryDocumentOnce) {
  Dataset data;
  LoaderConfig c = data.config();
  c.bos_id = kBos;
  c.eos_id = kEos;
  Loader loader(c);
  EXPECT_EQ(loader.tokens_per_epoch(), data.tokens + 2 * 150);
  int64_t bos = 0, eos = 0, body = 0;
  while (loader.state().epoch == 0) {
    const Batch b = loader.next();
    const std::vector<int32_t> tok = check_batch(b, c);
    for (int d = 0; d < b.seq.num_docs; ++d) {
      // A bos may only open a chunk, and an eos only close one.
      for (int32_t i = b.seq.doc_start(d) + 1; i < b.seq.doc_start(d) + b.seq.doc_length(d); ++i) {
        EXPECT_NE(tok[i], kBos);
      }
      for (int32_t i = b.seq.doc_start(d); i + 1 < b.seq.doc_start(d) + b.seq.doc_length(d); ++i) {
        EXPECT_NE(tok[i], kEos);
      }
    }
    for (int32_t t : tok) {
      bos += t == kBos;
      eos += t == kEos;
      body += t != kBos && t != kEos;
    }
  }
  EXPECT_EQ(bos, 150);
  EXPECT_EQ(eos, 150);
  EXPECT_EQ(body, data.tokens);
}

std::vector<std::vector<int32_t>> take(Loader& loader, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    const Batch b = loader.next();
    std::vector<int32_t> row = ints(b.tokens);
    row.push_back(-1);  // boundaries matter too
    row.insert(row.end(), b.seq.cu_seqlens_host.begin(), b.seq.cu_seqlens_host.end());
    out.push_back(std::move(row));
  }
  return out;
}

TEST(Loader, SameSeedSameBatchesWithOrWithoutPrefetch) {
  Dataset data;
  LoaderConfig c = data.config(3);
  Loader a(c);
  c.prefetch = 0;
  Loader b(c);
  const auto first = take(a, 60);  // crosses into the next epoch
  EXPECT_EQ(first, take(b, 60));
  EXPECT_GE(a.state().epoch, 1);
  c.seed = 4;
  Loader other(c);
  EXPECT_NE(first, take(other, 60));
  EXPECT_NE(first[0], first[first.size() - 1]);
}

TEST(Loader, RestoredStateContinuesWithTheNextBatch) {
  Dataset data;
  const LoaderConfig c = data.config(11);
  Loader reference(c);
  const auto all = take(reference, 70);
  for (int k : {1, 17, 45}) {
    Loader first(c);
    take(first, k);
    const std::string saved = first.state_json().dump();
    Loader resumed(data.config(999));  // the state's seed wins over the config's
    resumed.restore(nlohmann::json::parse(saved));
    const auto rest = take(resumed, 70 - k);
    EXPECT_EQ(rest, std::vector<std::vector<int32_t>>(all.begin() + k, all.end())) << "resumed after batch " << k;
    // Restoring the same loader mid-stream rewinds it too.
    first.restore(nlohmann::json::parse(saved));
    EXPECT_EQ(take(first, 3), std::vector<std::vector<int32_t>>(all.begin() + k, all.begin() + k + 3));
  }
}

// Six micro-batches a step, split as 1 x 6, 2 x 3, 3 x 2 and 6 x 1: every rank takes its
// consecutive share of what one process takes, every rank ends a step in the state one
// process ends it in (so a checkpoint resumes under any split), and every rank knows
// the whole step's trained tokens. Prefetch on and off, across an epoch's end.
TEST(Loader, ShareSplitsEachStepAsOneProcessTakesIt) {
  Dataset data;
  constexpr int kPerStep = 6, kSteps = 5;
  LoaderConfig c = data.config(5);
  c.share.per_rank = kPerStep;
  Loader one(c);
  std::vector<std::vector<int32_t>> all;
  std::vector<int64_t> step_tokens;
  std::vector<nlohmann::json> step_states;
  for (int s = 0; s < kSteps; ++s) {
    int64_t tokens = 0;
    for (int k = 0; k < kPerStep; ++k) {
      const Batch b = one.next();
      tokens += b.trained_tokens;
      std::vector<int32_t> row = ints(b.tokens);
      row.insert(row.end(), b.seq.cu_seqlens_host.begin(), b.seq.cu_seqlens_host.end());
      all.push_back(std::move(row));
    }
    EXPECT_EQ(one.step_trained_tokens(), tokens) << "step " << s;
    step_tokens.push_back(tokens);
    step_states.push_back(one.state_json());
  }
  EXPECT_GE(one.state().epoch, 1) << "the steps should cross an epoch's end";
  for (int ranks : {2, 3, 6}) {
    for (int prefetch : {0, 2}) {
      std::vector<std::unique_ptr<Loader>> loaders;
      for (int r = 0; r < ranks; ++r) {
        LoaderConfig rc = data.config(5);
        rc.prefetch = prefetch;
        rc.share = {r, ranks, kPerStep / ranks};
        loaders.push_back(std::make_unique<Loader>(rc));
      }
      for (int s = 0; s < kSteps; ++s) {
        for (int r = 0; r < ranks; ++r) {
          for (int k = 0; k < kPerStep / ranks; ++k) {
            const Batch b = loaders[static_cast<size_t>(r)]->next();
            std::vector<int32_t> row = ints(b.tokens);
            row.insert(row.end(), b.seq.cu_seqlens_host.begin(), b.seq.cu_seqlens_host.end());
            EXPECT_EQ(row, all[static_cast<size_t>(s * kPerStep + r * (kPerStep / ranks) + k)])
                << ranks << " ranks, rank " << r << ", step " << s << ", micro-batch " << k;
            EXPECT_EQ(loaders[static_cast<size_t>(r)]->step_trained_tokens(), step_tokens[static_cast<size_t>(s)]);
          }
          EXPECT_EQ(loaders[static_cast<size_t>(r)]->state_json(), step_states[static_cast<size_t>(s)])
              << ranks << " ranks, rank " << r << ", after step " << s;
        }
      }
    }
  }
  // A state saved under one split continues under another.
  LoaderConfig rc = data.config(5);
  rc.share = {1, 3, 2};
  Loader resumed(rc);
  resumed.restore(step_states[1]);
  resumed.next();
  std::vector<int32_t> row = ints(resumed.next().tokens);
  EXPECT_EQ(row, std::vector<int32_t>(all[2 * kPerStep + 3].begin(), all[2 * kPerStep + 3].begin() + row.size()));
}

TEST(Loader, StateFromOtherSettingsIsRejected) {
  Dataset data;
  Loader loader(data.config());
  nlohmann::json state = loader.state_json();
  LoaderConfig c = data.config();
  c.token_budget = 1024;
  Loader other(c);
  testing::expect_error([&] { other.restore(state); }, {"token_budget", "512", "1024"});
  state["cursor"] = loader.num_chunks();
  testing::expect_error([&] { loader.restore(state); }, {"cursor"});
  c = data.config();
  c.max_seq_len = 1024;
  testing::expect_error([&] { Loader bad(c); }, {"token budget 512", "max_seq_len 1024"});
}

}  // namespace
}  // namespace amber::data
