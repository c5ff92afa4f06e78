// TextStream and file sniffing: gzip and zstd files (several members or frames, named
// without their suffix) give exactly the lines of the plain file; truncated or corrupt
// compressed data and binary formats are refused naming the file and what it is.
#include <gtest/gtest.h>

#include <zlib.h>
#include <zstd.h>

#include "amber/data/text_stream.h"
#include "data/testing.h"

namespace amber::data {
namespace {

// Lines long and varied enough to cross the 64 KiB read and decode chunks many times.
std::string sample_text() {
  std::string text;
  for (int i = 0; i < 6000; ++i) {
    text += "{\"text\": \"row " + std::to_string(i) + " caf\\u00e9 " + std::string(i % 97, 'x') + "\"}\n";
    if (i % 1000 == 0) text += "\r\n";
  }
  return text + "last line without a newline";
}

// Two gzip members, as `cat a.gz b.gz` writes.
void write_gzip(const std::string& path, const std::string& text) {
  const size_t half = text.size() / 2;
  for (const auto& [mode, part] : {std::pair{"wb", text.substr(0, half)}, std::pair{"ab", text.substr(half)}}) {
    gzFile f = gzopen(path.c_str(), mode);
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, part.data(), static_cast<unsigned>(part.size())), static_cast<int>(part.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  }
}

// Two zstd frames end to end.
std::string zstd_frames(const std::string& text) {
  std::string out;
  const size_t half = text.size() / 2;
  for (const std::string& part : {text.substr(0, half), text.substr(half)}) {
    std::string frame(ZSTD_compressBound(part.size()), '\0');
    const size_t n = ZSTD_compress(frame.data(), frame.size(), part.data(), part.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out += frame.substr(0, n);
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& path, Compression* compression = nullptr) {
  TextStream in(path);
  if (compression) *compression = in.compression();
  std::vector<std::string> lines;
  std::string line;
  while (in.getline(line)) lines.push_back(line);
  return lines;
}

TEST(TextStream, GzipAndZstdGiveTheLinesOfThePlainFile) {
  testing::TempDir dir;
  const std::string text = sample_text();
  testing::write_file(dir.file("plain"), text);
  write_gzip(dir.file("gzipped"), text);
  testing::write_file(dir.file("zstded"), zstd_frames(text));
  Compression c = Compression::gzip;
  const std::vector<std::string> plain = lines_of(dir.file("plain"), &c);
  EXPECT_EQ(c, Compression::none);
  ASSERT_EQ(plain.size(), 6007u);
  EXPECT_EQ(plain.back(), "last line without a newline");
  EXPECT_EQ(lines_of(dir.file("gzipped"), &c), plain);
  EXPECT_EQ(c, Compression::gzip);
  EXPECT_EQ(lines_of(dir.file("zstded"), &c), plain);
  EXPECT_EQ(c, Compression::zstd);
}

TEST(TextStream, TruncatedOrCorruptCompressedDataIsRefused) {
  testing::TempDir dir;
  const std::string text = sample_text();
  write_gzip(dir.file("full.gz"), text);
  const std::string gz = testing::read_file(dir.file("full.gz"));
  const std::string zst = zstd_frames(text);
  testing::write_file(dir.file("cut.gz"), gz.substr(0, gz.size() / 3));
  testing::write_file(dir.file("cut.zst"), zst.substr(0, zst.size() - 10));
  testing::expect_error([&] { lines_of(dir.file("cut.gz")); }, {"cut.gz", "gzip", "truncated"});
  testing::expect_error([&] { lines_of(dir.file("cut.zst")); }, {"cut.zst", "zstd", "truncated"});
  std::string damaged = gz;
  damaged[damaged.size() - 8] ^= 0x5A;  // the last member's CRC-32
  testing::write_file(dir.file("damaged.gz"), damaged);
  testing::expect_error([&] { lines_of(dir.file("damaged.gz")); }, {"damaged.gz", "corrupt gzip"});
}

TEST(TextStream, BinaryFilesAreRefusedNamingTheFormat) {
  testing::TempDir dir;
  const std::string rest(200, 'a');
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"PAR1" + rest, {"Parquet", "a table"}},
      {std::string("PK\x03\x04", 4) + rest, {"zip archive"}},
      {"%PDF-1.7\n" + rest, {"PDF", "pdftotext"}},
      {std::string("\x7f" "ELF\x02\x01", 6) + rest, {"ELF"}},
      {std::string("\xfd" "7zXZ\x00\x00", 7) + rest, {"xz-compressed"}},
      {"BZh91AY&SY" + rest, {"bzip2"}},
      {"plain start " + std::string(1, '\0') + rest, {"looks binary", "byte 12"}},
      {std::string("\xff\xfeh\0i\0", 6), {"looks binary", "UTF-16"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("input" + std::to_string(i) + ".txt");
    testing::write_file(path, cases[i].first);
    std::vector<std::string> fragments = cases[i].second;
    fragments.push_back(path);
    testing::expect_error([&] { lines_of(path); }, fragments);
  }
  // A NUL inside compressed data is found once decoded.
  std::string binary = "text then " + std::string(1, '\0') + rest;
  write_gzip(dir.file("binary.gz"), binary);
  testing::expect_error([&] { lines_of(dir.file("binary.gz")); }, {"binary.gz", "looks binary"});
}

TEST(TextStream, EmptyAndNulAfterTheFirstKibAreText) {
  testing::TempDir dir;
  testing::write_file(dir.file("empty"), "");
  EXPECT_TRUE(lines_of(dir.file("empty")).empty());
  testing::write_file(dir.file("late"), std::string(2000, 'a') + std::string(1, '\0') + "\nb");
  EXPECT_EQ(lines_of(dir.file("late")).size(), 2u) << "only the first KiB is sniffed for NUL bytes";
}

}  // namespace
}  // namespace amber::data
