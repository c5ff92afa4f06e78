// Tokenizer tests: the byte-level alphabet, BPE merge order, ignore_merges, byte
// fallback, special tokens, training determinism, tokenizer.json round trips, errors.
#include <gtest/gtest.h>

#include <omp.h>

#include <set>

#include "amber/data/bpe_trainer.h"
#include "amber/data/byte_level.h"
#include "amber/data/corpus.h"
#include "amber/data/normalizer.h"
#include "amber/data/tokenizer_json.h"
#include "data/testing.h"

namespace amber::data {
namespace {

using testing::expect_error;

std::vector<std::string> read_docs(const std::vector<std::string>& files) {
  std::vector<std::string> docs;
  read_corpus(files, {}, [&](std::string&& d) { docs.push_back(std::move(d)); });
  return docs;
}

Tokenizer train(const std::vector<std::string>& docs, int32_t vocab, PreTokenizer pre = PreTokenizer::llama3()) {
  BpeTrainerOptions o;
  o.vocab_size = vocab;
  o.pre_tokenizer = std::move(pre);
  o.special_tokens = {"<|bos|>", "<|eos|>", "<|pad|>", "<|user|>"};
  BpeTrainer t(o);
  t.add_documents(docs);
  return t.train();
}

// A character-level model over a hand-made vocabulary, without pre-tokenization.
Tokenizer char_model(std::vector<std::pair<std::string, std::string>> merges, BpeOptions options = {}) {
  std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc", "aa"};
  return Tokenizer(BpeModel(vocab, std::move(merges), options, "test"), PreTokenizer(), {});
}

TEST(ByteLevel, AlphabetIsABijectionOnBytes) {
  std::set<std::string> chars;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    chars.insert(byte_level_char(static_cast<unsigned char>(b)));
    all += static_cast<char>(b);
  }
  EXPECT_EQ(chars.size(), 256u);
  EXPECT_EQ(byte_level_char(' '), "\xC4\xA0");   // U+0120 'Ġ', as in GPT-2
  EXPECT_EQ(byte_level_char('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_level_char('A'), "A");
  std::string back;
  EXPECT_TRUE(byte_level_decode(byte_level_encode(all), back));
  EXPECT_EQ(back, all);
}

TEST(BpeModel, LowestRankMergesFirst) {
  // (b, c) outranks (a, b): "abc" -> a + bc -> abc.
  EXPECT_EQ(char_model({{"b", "c"}, {"a", "b"}, {"a", "bc"}}).encode("abc"), (std::vector<int32_t>{5}));
  // (a, b) first, and no (ab, c) merge: "abc" stays ab + c.
  EXPECT_EQ(char_model({{"a", "b"}, {"b", "c"}}).encode("abc"), (std::vector<int32_t>{3, 2}));
  // Equal ranks resolve leftmost first: "aaa" -> aa + a.
  EXPECT_EQ(char_model({{"a", "a"}}).encode("aaa"), (std::vector<int32_t>{6, 0}));
}

TEST(BpeModel, IgnoreMergesTakesWholeVocabularyWords) {
  BpeOptions o;
  EXPECT_EQ(char_model({{"a", "b"}}, o).encode("abc"), (std::vector<int32_t>{3, 2}));
  o.ignore_merges = true;
  EXPECT_EQ(char_model({{"a", "b"}}, o).encode("abc"), (std::vector<int32_t>{5}));
}

TEST(BpeModel, ByteFallbackSpellsUnknownCharactersAsBytes) {
  std::vector<std::string> vocab = {"a", "<0xC3>", "<0xA9>"};
  BpeOptions o;
  o.byte_fallback = true;
  Tokenizer t(BpeModel(vocab, {}, o, "test"), PreTokenizer(), {});
  EXPECT_EQ(t.encode("a\xC3\xA9"), (std::vector<int32_t>{0, 1, 2}));  // "aé"
  EXPECT_EQ(t.decode(t.encode("a\xC3\xA9")), "a\xC3\xA9");
  expect_error([&] { t.encode("z"); }, {"no token for \"z\"", "byte_fallback"});
}

class Trained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    docs_ = new std::vector<std::string>(read_docs(testing::fortune_subset()));
    tokenizer_ = new Tokenizer(train(*docs_, 1000));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete docs_;
  }
  static std::vector<std::string>* docs_;
  static Tokenizer* tokenizer_;
};
std::vector<std::string>* Trained::docs_ = nullptr;
Tokenizer* Trained::tokenizer_ = nullptr;

TEST_F(Trained, VocabularyLayoutIsBytesMergesSpecials) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 1000);
  EXPECT_EQ(t.model().merges().size(), 1000u - 256 - 4);
  EXPECT_EQ(t.token_to_id(byte_level_char('A')), 'A');
  EXPECT_EQ(t.token_to_id("<|bos|>"), 996);
  EXPECT_EQ(t.token_to_id("<|user|>"), 999);
}

TEST_F(Trained, SpecialTokensAreNeverSplit) {
  const Tokenizer& t = *tokenizer_;
  const int32_t bos = *t.token_to_id("<|bos|>"), eos = *t.token_to_id("<|eos|>"), user = *t.token_to_id("<|user|>");
  const std::vector<int32_t> ids = t.encode("<|bos|>hello<|user|><|user|>world<|eos|>");
  EXPECT_EQ(ids.front(), bos);
  EXPECT_EQ(ids.back(), eos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), user), 2);
  // Merged with neighbours it is still one token; a partial spelling is ordinary text.
  const std::vector<int32_t> glued = t.encode("x<|bos|>y");
  ASSERT_EQ(glued.size(), 3u);
  EXPECT_EQ(glued[1], bos);
  const std::vector<int32_t> partial = t.encode("<|bos| <|eos");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), bos) + std::count(partial.begin(), partial.end(), eos), 0);
}

TEST_F(Trained, DecodeInvertsEncodeOnTheWholeCorpus) {
  const Tokenizer& t = *tokenizer_;
  const std::vector<std::string> all = read_docs(corpus_files({kDefaultCorpus}));
  ASSERT_GT(all.size(), 10000u);
  int64_t tokens = 0, bytes = 0, mismatches = 0;
  for (const std::string& doc : all) {
    const std::vector<int32_t> ids = t.encode(doc);
    mismatches += t.decode(ids) != doc;
    tokens += static_cast<int64_t>(ids.size());
    bytes += static_cast<int64_t>(doc.size());
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_LT(tokens, bytes / 2) << "a 1000-token BPE should compress English well below 2 bytes per token";
  const std::string varied = "Ça va? 日本語 🎉 1234567  \n\n\tdef f(x): return x<|eos|>";
  EXPECT_EQ(t.decode(t.encode(varied)), varied);
}

TEST_F(Trained, TrainingIsDeterministicAcrossRunsAndThreadCounts) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tokenizer one = train(*docs_, 1000);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.model().merges(), tokenizer_->model().merges());
  EXPECT_EQ(one.model().vocab(), tokenizer_->model().vocab());
  EXPECT_EQ(tokenizer_to_json(one).dump(), tokenizer_to_json(train(*docs_, 1000)).dump());
}

TEST_F(Trained, JsonSaveLoadKeepsIdsAndBytes) {
  testing::TempDir dir;
  const std::string path = dir.file("tokenizer.json");
  save_tokenizer_json(*tokenizer_, path);
  const Tokenizer loaded = load_tokenizer_json(path);
  EXPECT_EQ(tokenizer_to_json(loaded).dump(), tokenizer_to_json(*tokenizer_).dump());
  for (size_t i = 0; i < docs_->size(); i += 97) EXPECT_EQ(loaded.encode((*docs_)[i]), tokenizer_->encode((*docs_)[i]));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(BpeTrainer, FirstMergesAreTheMostFrequentPairs) {
  // GPT-2 pieces: "ab", " ab", " ab", " cd": (a,b) x3, then (Ġ, ab) x2.
  BpeTrainerOptions o;
  o.vocab_size = 258 + 3;
  o.pre_tokenizer = PreTokenizer::gpt2();
  BpeTrainer t(o);
  t.add_documents({"ab ab ab cd"});
  const Tokenizer tok = t.train();
  ASSERT_EQ(tok.model().merges().size(), 2u);
  EXPECT_EQ(tok.model().merges()[0], (std::pair<std::string, std::string>{"a", "b"}));
  EXPECT_EQ(tok.model().merges()[1], (std::pair<std::string, std::string>{"\xC4\xA0", "ab"}));
  EXPECT_EQ(tok.encode(" ab"), (std::vector<int32_t>{257}));
}

TEST(TokenizerJson, BothMergeSpellingsLoadAlike) {
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4})";
  const Tokenizer old_style = tokenizer_from_json(
      nlohmann::json::parse("{\"model\": {\"type\": \"BPE\", " + vocab + R"(, "merges": ["a b", "ab c"]}})"), "old");
  const Tokenizer new_style = tokenizer_from_json(
      nlohmann::json::parse("{\"model\": {\"type\": \"BPE\", " + vocab + R"(, "merges": [["a", "b"], ["ab", "c"]]}})"),
      "new");
  EXPECT_EQ(old_style.encode("abcab"), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(new_style.encode("abcab"), (std::vector<int32_t>{4, 3}));
}

TEST(TokenizerJson, BadFilesNameTheFileAndKey) {
  testing::TempDir dir;
  expect_error([&] { load_tokenizer_json(dir.file("missing.json")); }, {"missing.json", "cannot open"});
  testing::write_file(dir.file("broken.json"), "{\"model\": ");
  expect_error([&] { load_tokenizer_json(dir.file("broken.json")); }, {"broken.json", "not valid JSON"});
  const std::string base = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "c"]]}})";
  testing::write_file(dir.file("merge.json"), base);
  expect_error([&] { load_tokenizer_json(dir.file("merge.json")); }, {"merge.json", "merge 0", "missing"});
  testing::write_file(dir.file("norm.json"),
                      R"({"normalizer": {"type": "Lowercase"}, "model": {"type": "BPE", "vocab": {"a": 0}}})");
  expect_error([&] { load_tokenizer_json(dir.file("norm.json")); }, {"norm.json", "normalizer"});
  testing::write_file(dir.file("pre.json"), R"({"pre_tokenizer": {"type": "Whitespace"},
      "model": {"type": "BPE", "vocab": {"a": 0}}})");
  expect_error([&] { load_tokenizer_json(dir.file("pre.json")); }, {"pre.json", "pre_tokenizer", "Whitespace"});
  testing::write_file(dir.file("regex.json"), R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(["},
      "behavior": "Isolated", "invert": false}, "model": {"type": "BPE", "vocab": {"a": 0}}})");
  expect_error([&] { load_tokenizer_json(dir.file("regex.json")); }, {"regex.json", "does not compile"});
}

// A small file: vocab {a: 0, b: 1, ab: 2}, one merge, and the given added tokens.
nlohmann::json small_file(const std::string& added_tokens) {
  return nlohmann::json::parse(R"({"added_tokens": )" + added_tokens +
                               R"(, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
}

// Hugging Face loads these but silently renumbers the clashing token, so its ids and
// the file's would disagree; amber refuses them, naming the entry.
TEST(TokenizerJson, AddedTokensCollidingWithTheVocabularyOrEachOtherAreRefused) {
  auto added = [](int id, const std::string& content) {
    return "{\"id\": " + std::to_string(id) + ", \"content\": \"" + content + "\", \"special\": true}";
  };
  expect_error([&] { tokenizer_from_json(small_file("[" + added(1, "<x>") + "]"), "f.json"); },
               {"f.json", "added_tokens[0]", "id 1", "\"b\""});
  expect_error([&] { tokenizer_from_json(small_file("[" + added(5, "ab") + "]"), "f.json"); },
               {"f.json", "added_tokens[0]", "\"ab\"", "id 2"});
  expect_error([&] { tokenizer_from_json(small_file("[" + added(3, "<x>") + ", " + added(3, "<y>") + "]"), "f.json"); },
               {"f.json", "added_tokens[1]", "reuses id 3", "added_tokens[0]"});
  expect_error([&] { tokenizer_from_json(small_file("[" + added(3, "<x>") + ", " + added(4, "<x>") + "]"), "f.json"); },
               {"f.json", "added_tokens[1]", "<x>", "added_tokens[0]"});
  // A token listed in both places with one id and text is how GPT-2's file has <|endoftext|>.
  const Tokenizer ok = tokenizer_from_json(small_file("[" + added(1, "b") + ", " + added(3, "<x>") + "]"), "ok");
  EXPECT_EQ(ok.encode("ab<x>b"), (std::vector<int32_t>{0, 1, 3, 1}));  // added tokens are cut out first, as in HF
  EXPECT_EQ(ok.vocab_size(), 4);
}

// As Hugging Face: a BPE model without "merges" is refused, an empty list loads.
TEST(TokenizerJson, BpeModelWithoutMergesIsRefusedAndEmptyMergesLoad) {
  expect_error([] {
    tokenizer_from_json(nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}})"), "f.json");
  }, {"f.json", "merges", "missing"});
  const Tokenizer none = tokenizer_from_json(
      nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": []}})"), "e");
  EXPECT_EQ(none.encode("ab"), (std::vector<int32_t>{0, 1}));
}

// An id past 32 bits must not wrap onto another token (2^32 + 1 would read as 1).
TEST(TokenizerJson, IdsOutsideTheSupportedRangeAreRefused) {
  expect_error([] { tokenizer_from_json(small_file(R"([{"id": 4294967297, "content": "<x>"}])"), "f.json"); },
               {"f.json", "added_tokens[0].id", "4294967297"});
  expect_error([] { tokenizer_from_json(small_file(R"([{"id": -2, "content": "<x>"}])"), "f.json"); },
               {"f.json", "added_tokens[0].id", "-2"});
  expect_error([] {
    tokenizer_from_json(nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 8589934592},
        "merges": []}})"), "f.json");
  }, {"f.json", "vocab[\"b\"]", "8589934592"});
}

// Llama-3's regex backtracks once per character of a whitespace run before a letter,
// so 11M spaces pass PCRE2's default 10M match limit; the limits grow with the text, so
// the run encodes (Hugging Face gives the same ids; docs/data.md) and round-trips.
// SentencePiece-style spellings of spaces, against ids worked out by hand (hf_compat.py
// checks them against Hugging Face on real text): the vocabulary has "▁" (U+2581)
// words, and every spelling must turn "hi there" into ▁hi ▁there.
TEST(TokenizerJson, SentencePieceSpellingsOfSpacesEncodeAndDecode) {
  const std::string bar = "\xe2\x96\x81";
  const auto with = [&](const char* normalizer, const char* pre_tokenizer, const char* decoder) {
    const std::string text = std::string(R"({"added_tokens": [{"id": 9, "content": "<s>", "special": true}],
      "normalizer": )") + normalizer + R"(, "pre_tokenizer": )" + pre_tokenizer + R"(, "decoder": )" + decoder +
                             R"(, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"h": 0, "i": 1,
      "t": 2, "e": 3, "r": 4, ")" + bar + R"(": 5, ")" + bar + R"(hi": 6, ")" + bar + R"(there": 7, "<0x21>": 8,
      "hi": 10, "th": 11, "the": 12, "ther": 13, "there": 14},
      "merges": [["h", "i"], ["t", "h"], ["th", "e"], ["the", "r"], ["ther", "e"], [")" + bar + R"(", "hi"], [")" +
                             bar + R"(", "there"]]}})";
    return tokenizer_from_json(nlohmann::json::parse(text), "test");
  };
  const std::string replace = R"({"type": "Replace", "pattern": {"String": " "}, "content": ")" + bar + R"("})";
  const std::string prepend = R"({"type": "Prepend", "prepend": ")" + bar + R"("})";
  const std::string back = R"({"type": "Replace", "pattern": {"String": ")" + bar + R"("}, "content": " "})";
  const std::string llama2 = R"({"type": "Sequence", "normalizers": [)" + prepend + "," + replace + "]}";
  const std::string strip = R"({"type": "Sequence", "decoders": [)" + back +
                            R"(, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ",
                            "start": 1, "stop": 0}]})";
  const std::string metaspace = R"({"type": "Metaspace", "replacement": ")" + bar + R"(", "prepend_scheme": "first",
                                "split": true})";
  const Tokenizer legacy = with(llama2.c_str(), "null", strip.c_str());
  EXPECT_EQ(legacy.encode("hi there!"), (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(legacy.decode(legacy.encode("hi there!")), "hi there!");
  // The normalizer prepends to every segment, after an added token too.
  EXPECT_EQ(legacy.encode("<s>hi"), (std::vector<int32_t>{9, 6}));
  const Tokenizer mistral = with("null", metaspace.c_str(), metaspace.c_str());
  EXPECT_EQ(mistral.encode("hi there!"), (std::vector<int32_t>{6, 7, 8}));
  // "first": the segment after an added token gets no "▁".
  EXPECT_EQ(mistral.encode("<s>hi"), (std::vector<int32_t>{9, 10}));
  EXPECT_EQ(mistral.decode(std::vector<int32_t>{6, 7, 8}), "hi there!");
  // Written back and read again, a tokenizer keeps its ids and its text.
  for (const Tokenizer* t : {&legacy, &mistral}) {
    const Tokenizer again = tokenizer_from_json(nlohmann::json::parse(tokenizer_to_json(*t).dump()), "again");
    EXPECT_EQ(again.encode("<s>hi there!"), t->encode("<s>hi there!"));
    EXPECT_EQ(again.decode(again.encode("hi there!")), t->decode(t->encode("hi there!")));
  }
  expect_error([&] { with(R"({"type": "Replace", "pattern": {"Regex": " "}, "content": "x"})", "null", "null"); },
               {"test: normalizer", "pattern", "regex"});
  expect_error([&] { with(R"({"type": "Lowercase"})", "null", "null"); }, {"normalizer", "Lowercase", "NFC, NFD"});
  // Metaspace options amber cannot honour are refused by name, pre-tokenizer and decoder.
  expect_error([&] { with("null", R"({"type": "Metaspace", "prepend_scheme": "sometimes"})", "null"); },
               {"pre_tokenizer", "prepend_scheme is \"sometimes\"", "\"always\", \"first\" or \"never\""});
  expect_error([&] { with("null", R"({"type": "Metaspace", "replacement": ""})", "null"); },
               {"pre_tokenizer", "replacement must be a non-empty string"});
  expect_error([&] { with("null", "null", R"({"type": "Metaspace", "prepend_scheme": "sometimes"})"); },
               {"decoder", "prepend_scheme is \"sometimes\""});
}

// The Unicode forms (through utf8proc) and the literal steps, alone and in a Sequence.
TEST(Normalizer, UnicodeFormsAndLiteralSteps) {
  const auto normalized = [](const char* json, const std::string& text) {
    std::string storage;
    return std::string(Normalizer::from_json(nlohmann::json::parse(json), "test").apply(text, storage));
  };
  const std::string e_acute = "\xc3\xa9", e_combining = "e\xcc\x81", fi_ligature = "\xef\xac\x81";
  EXPECT_EQ(normalized(R"({"type": "NFC"})", e_combining + "!"), e_acute + "!");
  EXPECT_EQ(normalized(R"({"type": "NFD"})", e_acute), e_combining);
  EXPECT_EQ(normalized(R"({"type": "NFC"})", fi_ligature), fi_ligature);  // a compatibility mapping: NFKC's
  EXPECT_EQ(normalized(R"({"type": "NFKC"})", fi_ligature + e_combining), "fi" + e_acute);
  EXPECT_EQ(normalized(R"({"type": "NFKD"})", fi_ligature + e_acute), "fi" + e_combining);
  // Text with a NUL in it keeps its length (utf8proc is given the length, not a C string).
  EXPECT_EQ(normalized(R"({"type": "NFC"})", std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(normalized(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Prepend", "prepend": "_"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "_"}]})", e_combining + " x"),
            "_" + e_acute + "_x");
  EXPECT_EQ(normalized(R"({"type": "Prepend", "prepend": "_"})", ""), "");  // nothing to prepend to
  EXPECT_EQ(normalized("null", e_combining), e_combining);
}

TEST(Tokenizer, WhitespaceRunPastPcre2DefaultLimitsEncodesAndRoundTrips) {
  const Tokenizer t = train({"hello world", "a  b"}, 262);
  const std::string text = std::string(11'000'000, ' ') + "x";
  const std::vector<int32_t> ids = t.encode(text);
  EXPECT_EQ(t.decode(ids), text);
}

TEST(Tokenizer, RejectsInvalidUtf8WithItsOffset) {
  const Tokenizer t = train({"hello world"}, 260);
  expect_error([&] { t.encode("abc\xFF"); }, {"not valid UTF-8 at byte 3"});
}

}  // namespace
}  // namespace amber::data
