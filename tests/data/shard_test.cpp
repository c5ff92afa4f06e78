// Shard tests: write/read round trips for both token widths, rejection of truncated
// and bit-flipped files by name, and amber tokenize's split, manifest and restart.
#include <gtest/gtest.h>

#include "amber/data/bpe_trainer.h"
#include "amber/data/shard.h"
#include "amber/data/token_counts.h"
#include "amber/data/tokenize_corpus.h"
#include "amber/data/tokenizer_json.h"
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
    o.inputs.clear();
    for (const std::string& file : testing::fortune_subset()) o.inputs.push_back({file});
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
  read_corpus(testing::fortune_subset(), {}, [&](std::string&& d) { docs.push_back(std::move(d)); });
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
  o.inputs = {{testing::fortune_subset().front()}};
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  const TokenizeCorpusReport r = tokenize_corpus(*tokenizer_, o);
  EXPECT_EQ(r.val_docs, 0);
  EXPECT_TRUE(list_shards(o.out_dir, "val").empty());
  EXPECT_FALSE(list_shards(o.out_dir, "train").empty());
}

// Mixture weights: each document of a weight-2 input is written twice, in place; a
// weight-0.25 input keeps about a quarter of its documents, those whose text hash falls
// under 0.25, so the same ones in every run; the settings record the weights.
TEST_F(TokenizeCorpus, MixtureWeightsRepeatAndSampleDocumentsByTheirText) {
  testing::TempDir dir;
  std::string a, b;
  for (int i = 0; i < 100; ++i) a += "alpha document " + std::to_string(i) + "\n";
  for (int i = 0; i < 400; ++i) b += "beta document " + std::to_string(i) + "\n";
  testing::write_file(dir.file("a.txt"), a);
  testing::write_file(dir.file("b.txt"), b);
  TokenizeCorpusOptions o;
  o.inputs = {{dir.file("a.txt"), 2}, {dir.file("b.txt"), 0.25}};
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  o.shard_bytes = 2000;
  const TokenizeCorpusReport r = tokenize_corpus(*tokenizer_, o);

  std::vector<std::string> want;
  for (int i = 0; i < 100; ++i) want.insert(want.end(), 2, "alpha document " + std::to_string(i));
  for (int i = 0; i < 400; ++i) {
    const std::string doc = "beta document " + std::to_string(i);
    if (mixture_copies(doc, 0.25) == 1) want.push_back(doc);
  }
  EXPECT_NEAR(static_cast<double>(want.size() - 200), 100, 30) << "a quarter of b's 400 documents";
  std::vector<std::string> got;
  for (const std::string& path : list_shards(o.out_dir, "train")) {
    const Shard shard = Shard::open(path);
    for (int64_t d = 0; d < shard.num_docs(); ++d) got.push_back(tokenizer_->decode(shard.document(d)));
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(r.train_docs, static_cast<int64_t>(want.size()));
  const nlohmann::json settings = nlohmann::json::parse(testing::read_file(dir.file("out/settings.json")));
  EXPECT_EQ(settings["input_weights"], nlohmann::json::array({2.0, 0.25}));
  o.inputs[1].weight = 0.5;
  testing::expect_error([&] { tokenize_corpus(*tokenizer_, o); }, {"different settings"});
}

TEST(Mixture, InputWeightsParseAfterTheLastColon) {
  testing::TempDir dir;
  testing::write_file(dir.file("odd:name"), "x\n");
  EXPECT_EQ(parse_corpus_input(dir.file("a.txt")).weight, 1);
  const CorpusInput weighted = parse_corpus_input(dir.file("a.txt") + ":0.5");
  EXPECT_EQ(weighted.path, dir.file("a.txt"));
  EXPECT_EQ(weighted.weight, 0.5);
  EXPECT_EQ(parse_corpus_input(dir.file("odd:name")).path, dir.file("odd:name")) << "an existing path is taken whole";
  EXPECT_EQ(parse_corpus_input("host:dir/x").path, "host:dir/x") << "no number after the colon: a path";
  testing::expect_error([&] { parse_corpus_input("a.txt:0"); }, {"a.txt:0", "(0, 1000]"});
  testing::expect_error([&] { parse_corpus_input("a.txt:inf"); }, {"a.txt:inf", "(0, 1000]"});
  testing::expect_error([&] { parse_corpus_input(":2"); }, {"no path"});
  EXPECT_EQ(mixture_copies("any text", 3), 3);
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

// The manifest identifies what made the shards and what they hold: the tokenizer's
// fingerprint and vocabulary, and every shard's documents, tokens and checksum. Shards
// checked against another tokenizer, or a file swapped between splits, are refused by
// name; a manifest without these fields (older amber) passes with a one-line notice.
TEST_F(TokenizeCorpus, ManifestIdentifiesTheTokenizerAndEveryShard) {
  testing::TempDir dir;
  const TokenizeCorpusOptions o = subset_options(dir.file("out"));
  tokenize_corpus(*tokenizer_, o);
  const ShardSetCheck ok = check_shards(o.out_dir, tokenizer_, "tok.json");
  EXPECT_EQ(ok.vocab_size, tokenizer_->vocab_size());
  EXPECT_EQ(ok.notice, "");

  // Same vocabulary size, other merges: the case that used to train with exit 0.
  BpeTrainerOptions other_options;
  other_options.vocab_size = tokenizer_->vocab_size();
  other_options.special_tokens = {"<|bos|>", "<|eos|>", "<|pad|>"};
  BpeTrainer other_trainer(other_options);
  other_trainer.add_documents({"an entirely different corpus", "with other merges entirely"});
  const Tokenizer other = other_trainer.train();
  ASSERT_NE(tokenizer_fingerprint(other), tokenizer_fingerprint(*tokenizer_));
  testing::expect_error([&] { check_shards(o.out_dir, &other, "other.json"); },
                        {"other.json", "fingerprint", tokenizer_fingerprint(*tokenizer_), tokenizer_fingerprint(other)});

  const std::string train0 = dir.file("out/train-00000.bin"), val0 = dir.file("out/val-00000.bin");
  std::filesystem::rename(train0, dir.file("t"));
  std::filesystem::rename(val0, train0);
  std::filesystem::rename(dir.file("t"), val0);
  testing::expect_error([&] { check_shards(o.out_dir, tokenizer_, "tok.json"); }, {train0, "swapped"});
  std::filesystem::rename(train0, dir.file("t"));
  std::filesystem::rename(val0, train0);
  std::filesystem::rename(dir.file("t"), val0);

  // Another shard with the same document and token counts is caught by its checksum.
  const Shard first = Shard::open(train0);
  std::vector<int32_t> tokens;
  std::vector<uint64_t> offsets{0};
  for (int64_t d = 0; d < first.num_docs(); ++d) {
    std::vector<int32_t> doc = first.document(d);
    if (d == 0 && !doc.empty()) doc[0] = (doc[0] + 1) % tokenizer_->vocab_size();
    tokens.insert(tokens.end(), doc.begin(), doc.end());
    offsets.push_back(tokens.size());
  }
  const std::string saved = testing::read_file(train0);
  write_shard(train0, tokens, offsets, first.vocab_size());
  testing::expect_error([&] { check_shards(o.out_dir, tokenizer_, "tok.json"); }, {train0, "checksum"});
  testing::write_file(train0, saved);

  nlohmann::json manifest = nlohmann::json::parse(testing::read_file(dir.file("out/manifest.json")));
  manifest.erase("tokenizer");
  for (const char* split : {"train", "val"})
    for (auto& e : manifest[split]) e.erase("checksum");
  testing::write_file(dir.file("out/manifest.json"), manifest.dump());
  const ShardSetCheck old = check_shards(o.out_dir, &other, "other.json");
  EXPECT_NE(old.notice.find("cannot be checked"), std::string::npos) << old.notice;
  EXPECT_EQ(old.notice.find('\n'), std::string::npos) << old.notice;
  EXPECT_EQ(old.vocab_size, tokenizer_->vocab_size());
}

// A document the pre-tokenizer's regex cannot split (here a pattern that backtracks
// exponentially, which PCRE2 stops at its match limit, as it does a huge whitespace run)
// is reported with its file and its index there, not as a bare regex error.
TEST(TokenizeCorpusErrors, DocumentTheRegexCannotSplitIsReportedWithFileAndIndex) {
  testing::TempDir dir;
  const Tokenizer tok = tokenizer_from_json(nlohmann::json::parse(R"({
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})"), "tok");
  testing::write_file(dir.file("first.txt"), "ab\nba\n");
  testing::write_file(dir.file("second.txt"), "ab\naaaa\n" + std::string(40, 'a') + "b\nba\n");
  TokenizeCorpusOptions o;
  o.inputs = {{dir.file("first.txt")}, {dir.file("second.txt")}};
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  testing::expect_error([&] { tokenize_corpus(tok, o); }, {"document 2", dir.file("second.txt"), "match limit"});
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
