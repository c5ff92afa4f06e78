// Shard tests: write/read round trips for both token widths, rejection of truncated
// and bit-flipped files by name, and amber tokenize's split, manifest and restart.
#include <gtest/gtest.h>

#include "amber/data/bpe_trainer.h"
#include "amber/data/shard.h"
#include "amber/data/token_counts.h"
#include "amber/data/tokenize_corpus.h"
#include "data/testing.h"

namespace amber::data {
namespace {

struct Written {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> offsets{0};
};

Written sample_shard(int32_t vocab, int docs) {
  Written w;
  uint64_t state = 12345;
  for (int d = 0; d < docs; ++d) {
    const int len = d % 5 == 4 ? 0 : 1 + d * 7 % 50;  // includes empty documents
    for (int i = 0; i < len; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      w.tokens.push_back(static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab)));
    }
    w.offsets.push_back(w.tokens.size());
  }
  return w;
}

TEST(Shard, RoundTripsU16AndU32Tokens) {
  testing::TempDir dir;
  for (int32_t vocab : {65536, 200000}) {
    const Written w = sample_shard(vocab, 40);
    const std::string path = dir.file("s.bin");
    write_shard(path, w.tokens, w.offsets, vocab);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    const Shard s = Shard::open(path);
    EXPECT_EQ(s.token_bytes(), vocab <= 65536 ? 2 : 4);
    EXPECT_EQ(s.vocab_size(), vocab);
    ASSERT_EQ(s.num_docs(), 40);
    ASSERT_EQ(s.num_tokens(), static_cast<int64_t>(w.tokens.size()));
    for (int d = 0; d < 40; ++d) {
      const std::vector<int32_t> want(w.tokens.begin() + static_cast<std::ptrdiff_t>(w.offsets[d]),
                                      w.tokens.begin() + static_cast<std::ptrdiff_t>(w.offsets[d + 1]));
      EXPECT_EQ(s.document(d), want);
    }
    int32_t middle[3];
    s.read(1, 2, 3, middle);
    EXPECT_EQ(middle[0], w.tokens[w.offsets[1] + 2]);
    EXPECT_EQ(middle[2], w.tokens[w.offsets[1] + 4]);
  }
}

TEST(Shard, TruncatedAndBitFlippedFilesAreRejectedByName) {
  testing::TempDir dir;
  const Written w = sample_shard(65536, 30);
  const std::string good = dir.file("good.bin");
  write_shard(good, w.tokens, w.offsets, 65536);
  const std::string bytes = testing::read_file(good);
  const std::string path = dir.file("damaged-00003.bin");
  for (size_t keep : {size_t{0}, size_t{10}, size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    testing::write_file(path, bytes.substr(0, keep));
    testing::expect_error([&] { Shard::open(path); }, {"damaged-00003.bin", "truncated"});
  }
  testing::write_file(path, bytes + "x");
  testing::expect_error([&] { Shard::open(path); }, {"damaged-00003.bin", "trailing bytes"});
  // One flipped bit anywhere: magic, counts, checksum, tokens, offsets, last byte.
  int rejected = 0, flips = 0;
  for (size_t at : {size_t{0}, size_t{9}, size_t{17}, size_t{33}, size_t{41}, size_t{70}, bytes.size() / 2,
                    bytes.size() - 8, bytes.size() - 1}) {
    for (int bit : {0, 7}) {
      std::string flipped = bytes;
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
      testing::write_file(path, flipped);
      ++flips;
      try {
        Shard::open(path);
      } catch (const Error& e) {
        rejected += std::string(e.what()).find("damaged-00003.bin") != std::string::npos;
      }
    }
  }
  EXPECT_EQ(rejected, flips);
  EXPECT_EQ(Shard::open(good).num_tokens(), static_cast<int64_t>(w.tokens.size()));
}

class TokenizeCorpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BpeTrainerOptions o;
    o.vocab_size = 600;
    BpeTrainer t(o);
    std::vector<std::string> docs;
    read_corpus(testing::fortune_subset(), {}, [&](std::string&& d) { docs.push_back(std::move(d)); });
    t.add_documents(docs);
    tokenizer_ = new Tokenizer(t.train());
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  // The fortunes subset into `out`, in shards of 100 kB with 5% held out.
  static TokenizeCorpusOptions subset_options(const std::string& out) {
    TokenizeCorpusOptions o;
    o.inputs = testing::fortune_subset();
    o.out_dir = out;
    o.val_fraction = 0.05;
    o.shard_bytes = 100000;
    return o;
  }
  static Tokenizer* tokenizer_;
};
Tokenizer* TokenizeCorpus::tokenizer_ = nullptr;

TEST_F(TokenizeCorpus, ShardsHoldEveryDocumentOnceWithAStableValSplit) {
  testing::TempDir dir;
  TokenizeCorpusOptions o = subset_options(dir.file("out"));
  std::vector<std::string> docs;
  read_corpus(o.inputs, {}, [&](std::string&& d) { docs.push_back(std::move(d)); });
  const TokenizeCorpusReport r = tokenize_corpus(*tokenizer_, o);
  EXPECT_EQ(r.train_docs + r.val_docs, static_cast<int64_t>(docs.size()));
  EXPECT_GT(r.shards_written, 2);
  EXPECT_NEAR(static_cast<double>(r.val_docs) / static_cast<double>(docs.size()), 0.05, 0.02);

  // Shards, read back in order, give the documents in input order per split.
  std::vector<std::string> train_docs, val_docs;
  for (const std::string& d : docs) (is_validation_document(d, 0.05, 0) ? val_docs : train_docs).push_back(d);
  for (const auto& [split, want] : {std::pair{"train", &train_docs}, std::pair{"val", &val_docs}}) {
    size_t next = 0;
    for (const std::string& path : list_shards(o.out_dir, split)) {
      const Shard s = Shard::open(path);
      for (int64_t d = 0; d < s.num_docs(); ++d, ++next) {
        ASSERT_LT(next, want->size());
        ASSERT_EQ(tokenizer_->decode(s.document(d)), (*want)[next]) << split << " document " << next;
      }
    }
    EXPECT_EQ(next, want->size()) << split;
  }

  // A second run keeps every shard; a damaged one is rewritten.
  const std::string victim = list_shards(o.out_dir, "train")[1];
  const int64_t victim_docs = Shard::open(victim).num_docs();
  std::filesystem::resize_file(victim, std::filesystem::file_size(victim) - 5);
  const TokenizeCorpusReport again = tokenize_corpus(*tokenizer_, o);
  EXPECT_EQ(again.shards_written, 1);
  EXPECT_EQ(again.shards_reused, r.shards_written - 1);
  EXPECT_EQ(again.train_tokens, r.train_tokens);
  EXPECT_EQ(Shard::open(victim).num_docs(), victim_docs);

  o.val_fraction = 0.1;
  testing::expect_error([&] { tokenize_corpus(*tokenizer_, o); }, {"different settings", "fresh --out"});
  testing::expect_error([&] { list_shards(dir.file("nothing"), "train"); }, {"manifest.json", "finished"});
}

// --val-fraction 0 writes a manifest whose val list is empty: listed as no shards, which
// the trainer reads as "nothing to evaluate".
TEST_F(TokenizeCorpus, NoValidationFractionListsNoValShards) {
  testing::TempDir dir;
  TokenizeCorpusOptions o;
  o.inputs = {testing::fortune_subset().front()};
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  const TokenizeCorpusReport r = tokenize_corpus(*tokenizer_, o);
  EXPECT_EQ(r.val_docs, 0);
  EXPECT_TRUE(list_shards(o.out_dir, "val").empty());
  EXPECT_FALSE(list_shards(o.out_dir, "train").empty());
}

// amber tokenize stores the training split's token counts (the unigram baseline's) beside
// the shards: they equal the counts read back from the shards, also after a restart that
// keeps every shard; a damaged counts file is refused by name.
TEST_F(TokenizeCorpus, StoredTokenCountsEqualTheShardsCounts) {
  testing::TempDir dir;
  const TokenizeCorpusOptions o = subset_options(dir.file("out"));
  const TokenizeCorpusReport first = tokenize_corpus(*tokenizer_, o);
  const TokenizeCorpusReport again = tokenize_corpus(*tokenizer_, o);
  EXPECT_EQ(again.shards_reused, first.shards_written);
  const std::optional<TokenCounts> stored = stored_token_counts(o.out_dir, "train");
  ASSERT_TRUE(stored.has_value());
  const TokenCounts counted = count_shard_tokens(list_shards(o.out_dir, "train"));
  EXPECT_EQ(stored->counts, counted.counts);
  EXPECT_EQ(stored->counts.size(), static_cast<size_t>(tokenizer_->vocab_size()));
  EXPECT_EQ(stored->documents, first.train_docs);
  EXPECT_EQ(stored->tokens, first.train_tokens);
  EXPECT_EQ(counted.documents, first.train_docs);
  EXPECT_EQ(counted.tokens, first.train_tokens);
  EXPECT_FALSE(stored_token_counts(o.out_dir, "val").has_value());

  const std::string path = dir.file("out/train-token-counts.json");
  testing::write_file(path, R"({"documents": 2, "tokens": 5, "counts": [1, 3]})");
  testing::expect_error([&] { stored_token_counts(o.out_dir, "train"); },
                        {"train-token-counts.json", "do not add up", "damaged"});
}

TEST(ValSplit, HashIsStableAndSeeded) {
  int held = 0, moved = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string doc = "document number " + std::to_string(i);
    const bool v = is_validation_document(doc, 0.1, 0);
    EXPECT_EQ(v, is_validation_document(doc, 0.1, 0));
    held += v;
    moved += v != is_validation_document(doc, 0.1, 1);
  }
  EXPECT_NEAR(held / 20000.0, 0.1, 0.01);
  EXPECT_GT(moved, 1000) << "a different seed must hold out different documents";
}

}  // namespace
}  // namespace amber::data
