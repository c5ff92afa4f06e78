// The Parquet reader as a whole: pyarrow-written files (tests/data/parquet/, made by its
// make_fixtures.py) of every codec, encoding and page version read to exactly their rows
// and null counts; columns it cannot read are refused naming file and column; damaged
// copies are always an amber::Error, never a crash.
#include <gtest/gtest.h>

#include <optional>

#include "amber/data/corpus.h"
#include "amber/data/parquet_reader.h"
#include "data/testing.h"

namespace amber::data {
namespace {

std::string fixture(const std::string& name) { return std::string(AMBER_SOURCE_DIR) + "/tests/data/parquet/" + name; }

// The text column make_fixtures.py writes: nullopt for a null.
std::vector<std::optional<std::string>> fixture_texts() {
  std::vector<std::optional<std::string>> texts;
  for (int i = 0; i < 60; ++i) {
    if (i % 7 == 3) {
      texts.emplace_back();
      continue;
    }
    std::string t = "row " + std::to_string(i) + " café";
    for (int k = 0; k < i % 4; ++k) t += " ☕";
    texts.emplace_back(t);
  }
  return texts;
}

const std::vector<std::string> kFixtures = {"none-plain-v1.parquet", "snappy-dict-v1.parquet",
                                            "gzip-plain-v2.parquet", "zstd-dict-v2.parquet"};

TEST(ParquetReader, PyarrowFilesOfEveryCodecAndPageKindGiveTheirRowsInOrder) {
  std::vector<std::string> want;
  int64_t nulls = 0;
  for (const auto& t : fixture_texts()) {
    if (t) want.push_back(*t);
    nulls += t ? 0 : 1;
  }
  for (const std::string& name : kFixtures) {
    std::vector<std::string> got;
    const ParquetColumnStats s =
        read_parquet_column(fixture(name), "text", [&](std::string_view v) { got.emplace_back(v); });
    EXPECT_EQ(got, want) << name;
    EXPECT_EQ(s.rows, 60) << name;
    EXPECT_EQ(s.nulls, nulls) << name;
    // read_corpus gives the same documents, counting the nulls.
    std::vector<std::string> docs;
    const CorpusStats c = read_corpus({fixture(name)}, {}, [&](std::string&& d) { docs.push_back(std::move(d)); });
    EXPECT_EQ(docs, want) << name;
    EXPECT_EQ(c.null_values, nulls) << name;
  }
}

TEST(ParquetReader, ColumnsItCannotReadAreRefusedNamingFileColumnAndWayOut) {
  const std::string file = fixture("zstd-dict-v2.parquet");
  auto read = [](const std::string& path, const std::string& column) {
    read_parquet_column(path, column, [](std::string_view) {});
  };
  testing::expect_error([&] { read(file, "body"); }, {file, "no column \"body\"", "--field", "string columns: text"});
  testing::expect_error([&] { read(file, "id"); }, {file, "column \"id\"", "INT64", "not a string column"});
  testing::expect_error([&] { read(file, "tags"); }, {file, "column \"tags\"", "nested", "JSONL"});
  const std::string lz4 = fixture("lz4.parquet");
  testing::expect_error([&] { read(lz4, "text"); }, {lz4, "column \"text\"", "LZ4_RAW", "pyarrow"});
}

// Every damaged copy of every fixture (cut short, or one byte changed) reads to an
// amber::Error or to some rows, never to a crash (the sanitizer build checks memory).
TEST(ParquetReader, DamagedFilesAreErrorsNeverCrashes) {
  testing::TempDir dir;
  const std::string path = dir.file("damaged.parquet");
  int errors = 0, reads = 0;
  for (const std::string& name : kFixtures) {
    const std::string bytes = testing::read_file(fixture(name));
    std::vector<std::string> variants;
    for (size_t n = 0; n < bytes.size(); n += 97) variants.push_back(bytes.substr(0, n));
    for (size_t i = 0; i < bytes.size(); i += 13) {
      std::string v = bytes;
      v[i] = static_cast<char>(v[i] ^ (1 << (i % 8)));
      variants.push_back(v);
    }
    for (const std::string& v : variants) {
      testing::write_file(path, v);
      ++reads;
      try {
        read_parquet_column(path, "text", [](std::string_view) {});
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, reads / 4);  // most damage is caught, not read as other rows
}

}  // namespace
}  // namespace amber::data
