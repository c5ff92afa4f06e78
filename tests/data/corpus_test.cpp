// Corpus reader tests: each format yields exactly the expected documents, compressed or
// not; folders expand like the fortunes layout; bad input names the file and line; a
// file mostly of invalid UTF-8 is refused.
#include <gtest/gtest.h>

#include <zlib.h>

#include "amber/data/corpus.h"
#include "data/testing.h"

namespace amber::data {
namespace {

std::vector<std::string> docs_of(const std::string& path, CorpusOptions options, CorpusStats* stats = nullptr) {
  std::vector<std::string> docs;
  const CorpusStats s = read_corpus({path}, options, [&](std::string&& d) { docs.push_back(std::move(d)); });
  if (stats) *stats = s;
  return docs;
}

TEST(Corpus, LinesParagraphsFortunesAndJsonl) {
  testing::TempDir dir;
  testing::write_file(dir.file("a.txt"), "first line\r\n\nsecond line\nthird");
  EXPECT_EQ(docs_of(dir.file("a.txt"), {CorpusFormat::lines}),
            (std::vector<std::string>{"first line", "second line", "third"}));
  testing::write_file(dir.file("b.txt"), "para one\ncontinues\n\n  \npara two\n\n\n");
  EXPECT_EQ(docs_of(dir.file("b.txt"), {CorpusFormat::paragraphs}),
            (std::vector<std::string>{"para one\ncontinues", "para two"}));
  testing::write_file(dir.file("c"), "A fortune\n\tindented\n%\n%\nSecond one.\n%\n");
  EXPECT_EQ(docs_of(dir.file("c"), {CorpusFormat::fortune}),
            (std::vector<std::string>{"A fortune\n\tindented", "Second one."}));
  EXPECT_EQ(docs_of(dir.file("c"), {CorpusFormat::automatic}).size(), 2u) << "a '%' line means fortune format";
  testing::write_file(dir.file("d.jsonl"),
                      "{\"text\": \"caf\\u00e9\\nline\", \"id\": 1}\n\n{\"body\": \"x\", \"text\": \"\\ud83c\\udf89\"}\n");
  EXPECT_EQ(docs_of(dir.file("d.jsonl"), {}), (std::vector<std::string>{"caf\xC3\xA9\nline", "\xF0\x9F\x8E\x89"}));
  CorpusOptions body{CorpusFormat::jsonl, "body"};
  testing::expect_error([&] { docs_of(dir.file("d.jsonl"), body); }, {"d.jsonl:1", "no field \"body\""});
  testing::write_file(dir.file("e.jsonl"), "{\"text\": \"x\"}\n{\"text\": \"y\", \"n\": 1e99999}\n");
  testing::expect_error([&] { docs_of(dir.file("e.jsonl"), {}); }, {"e.jsonl:2", "not valid JSON"});
}

TEST(Corpus, InvalidUtf8IsRepairedAndCounted) {
  testing::TempDir dir;
  testing::write_file(dir.file("bad.txt"), "ok\nbad \xFF\xFE byte\n");
  CorpusStats stats;
  const auto docs = docs_of(dir.file("bad.txt"), {CorpusFormat::lines, "text", 2.0 / 13}, &stats);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[1], "bad \xEF\xBF\xBD\xEF\xBF\xBD byte");
  EXPECT_EQ(stats.repaired_bytes, 2);
  EXPECT_EQ(stats.documents, 2);
}

TEST(Corpus, FileWithMoreInvalidUtf8ThanAllowedIsRefused) {
  testing::TempDir dir;
  testing::write_file(dir.file("latin1.txt"), "ok\nbad \xFF\xFE byte\n");  // 2 of 13 document bytes
  testing::expect_error([&] { docs_of(dir.file("latin1.txt"), {CorpusFormat::lines, "text", 0.15}); },
                        {"latin1.txt", "2 of its 13", "0.1538", "--max-invalid-utf8 0.15", "iconv"});
  std::string mostly_invalid;
  for (int i = 0; i < 500; ++i) mostly_invalid += "\xE9t\xE9\n";
  testing::write_file(dir.file("mostly.txt"), mostly_invalid);
  testing::expect_error([&] { docs_of(dir.file("mostly.txt"), {}); }, {"mostly.txt", "--max-invalid-utf8 0.01"});
}

TEST(Corpus, CompressedJsonlIsReadByItsBytesNotItsName) {
  testing::TempDir dir;
  const std::string rows = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  for (const std::string name : {"rows.jsonl.gz", "rows.jsonl"}) {  // the second is gzip all the same
    gzFile f = gzopen(dir.file(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    gzwrite(f, rows.data(), static_cast<unsigned>(rows.size()));
    gzclose(f);
    EXPECT_EQ(docs_of(dir.file(name), {}), (std::vector<std::string>{"one", "two"})) << name;
  }
}

TEST(Corpus, FoldersSkipIndexesSymlinksAndSubfolders) {
  testing::TempDir dir;
  testing::write_file(dir.file("b"), "x\n%\n");
  testing::write_file(dir.file("a"), "y\n%\n");
  testing::write_file(dir.file("a.dat"), "index");
  std::filesystem::create_symlink(dir.file("a"), dir.file("a.u8"));
  std::filesystem::create_directories(dir.file("off"));
  testing::write_file(dir.file("off/c"), "z\n%\n");
  EXPECT_EQ(corpus_files({dir.path().string()}), (std::vector<std::string>{dir.file("a"), dir.file("b")}));
  testing::expect_error([&] { corpus_files({dir.file("nope")}); }, {"nope", "does not exist"});
}

TEST(Corpus, BundledFortunesGiveOneDocumentPerFortune) {
  const std::vector<std::string> files = corpus_files({kDefaultCorpus});
  std::vector<std::string> docs;
  const CorpusStats stats = read_corpus(files, {}, [&](std::string&& d) { docs.push_back(std::move(d)); });
  EXPECT_GT(files.size(), 30u);
  EXPECT_GT(stats.documents, 10000);
  EXPECT_EQ(stats.repaired_bytes, 0);
  for (const std::string& d : docs) {
    ASSERT_FALSE(d.empty());
    ASSERT_EQ(d.find("\n%\n"), std::string::npos) << "a separator leaked into a document";
  }
}

}  // namespace
}  // namespace amber::data
