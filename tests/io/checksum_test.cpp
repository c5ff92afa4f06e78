#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "amber/core/error.h"
#include "amber/io/checksum.h"

namespace amber {
namespace {

TEST(Checksum, Xxh64MatchesTheReferenceVectors) {
  EXPECT_EQ(xxh64("", 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxh64("a", 1), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(xxh64("abc", 3), 0x44bc2cf5ad770999ull);
  // 39 bytes: the 32-byte stripe path and a 7-byte tail (python-xxhash's documented example).
  EXPECT_EQ(xxh64("Nobody inspects the spammish repetition", 39), 0xfbcea83c8a378bf1ull);
}

TEST(Checksum, AFileHashesAsItsBytesAndOneFlippedBitChangesIt) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("amber_checksum_" + std::to_string(::getpid()))).string();
  std::string bytes(3 * (1 << 20) + 17, '\0');  // spans several read buffers
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  std::ofstream(path, std::ios::binary) << bytes;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(xxh64(bytes.data(), bytes.size())));
  EXPECT_EQ(file_checksum(path), std::string("xxh64:") + hex);
  bytes[1 << 20] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_NE(file_checksum(path), std::string("xxh64:") + hex);
  std::filesystem::remove(path);
  EXPECT_THROW(file_checksum(path), Error);
}

}  // namespace
}  // namespace amber
