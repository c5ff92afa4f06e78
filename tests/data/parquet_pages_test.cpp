// Parquet's page-level decoding: the RLE/bit-packed hybrid (definition levels and
// dictionary indices) at every bit width, and each page codec restoring a page exactly,
// with damaged data, wrong sizes and unsupported codecs refused.
#include <gtest/gtest.h>

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include "amber/data/parquet_codec.h"
#include "amber/data/rle_hybrid.h"
#include "data/testing.h"
#include "data/thrift_writer.h"

namespace amber::data {
namespace {

using testing::bytes_of;
using testing::CompactWriter;

// Packs values at `width` bits, least significant bit first, as Parquet's packed runs do.
std::string pack(const std::vector<uint32_t>& values, int width) {
  std::string out((values.size() * width + 7) / 8, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    for (int b = 0; b < width; ++b) {
      const size_t bit = i * width + b;
      if (values[i] >> b & 1) out[bit / 8] = static_cast<char>(out[bit / 8] | 1 << (bit % 8));
    }
  }
  return out;
}

TEST(RleHybrid, RepeatedAndPackedRunsDecodeAtEveryWidth) {
  // Parquet's own example: 0..7 packed at 3 bits is 0x88 0xc6 0xfa.
  EXPECT_EQ(pack({0, 1, 2, 3, 4, 5, 6, 7}, 3), std::string("\x88\xc6\xfa"));
  for (int width : {0, 1, 3, 8, 13, 17, 31, 32}) {
    const uint32_t mask = width == 32 ? 0xffffffffu : (1u << width) - 1;
    std::vector<uint32_t> packed(16);
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint32_t>(i * 2654435761u) & mask;
    const uint32_t repeated = 0x9e3779b9u & mask;
    CompactWriter w;
    w.varint(1000 << 1);  // 1000 copies of `repeated`
    for (int i = 0; i < (width + 7) / 8; ++i) w.out += static_cast<char>(repeated >> (8 * i));
    w.varint(2 << 1 | 1);  // two groups of 8 packed values
    w.out += pack(packed, width);
    RleHybridDecoder d(bytes_of(w.out), width, "test runs");
    EXPECT_EQ(d.next(), repeated);
    EXPECT_EQ(d.repeats_left(), 999u);
    d.skip_repeats(998);
    EXPECT_EQ(d.next(), repeated);
    for (size_t i = 0; i < packed.size(); ++i) EXPECT_EQ(d.next(), packed[i]) << "width " << width << " value " << i;
    testing::expect_error([&] { d.next(); }, {"test runs", "end before"});
  }
}

TEST(RleHybrid, CutRunsAndWideValuesAreRefused) {
  std::string packed = "\x03" + pack({1, 0, 1, 1, 0, 0, 1, 0}, 3);  // one group at 3 bits
  const std::string cut_run = packed.substr(0, 2);  // the header and a byte: two of the eight values
  RleHybridDecoder cut(bytes_of(cut_run), 3, "cut run");
  EXPECT_EQ(cut.next(), 1u);
  EXPECT_EQ(cut.next(), 0u);
  testing::expect_error([&] { cut.next(); }, {"cut run", "cut off"});
  const std::string five("\x02\x05", 2);  // a run of one 5, which needs 3 bits
  RleHybridDecoder wide(bytes_of(five), 2, "wide value");
  testing::expect_error([&] { wide.next(); }, {"wide value", "wider than 2 bits"});
  testing::expect_error([&] { RleHybridDecoder(bytes_of(packed), 33, "too wide"); }, {"too wide", "bit width"});
}

// Some text that compresses, and each codec's compression of it.
std::string page_text() {
  std::string s;
  for (int i = 0; i < 2000; ++i) s += "value " + std::to_string(i % 37) + " café\n";
  return s;
}

std::string snappy_of(const std::string& s) {
  size_t n = snappy_max_compressed_length(s.size());
  std::string out(n, '\0');
  EXPECT_EQ(snappy_compress(s.data(), s.size(), out.data(), &n), SNAPPY_OK);
  return out.substr(0, n);
}

std::string deflate_of(const std::string& s, int window_bits) {  // 16 + 15: gzip; 15: zlib
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, s.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = static_cast<uInt>(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string zstd_of(const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  return out.substr(0, n);
}

TEST(ParquetCodec, EachCodecRestoresThePageExactly) {
  const std::string text = page_text();
  const std::vector<std::pair<ParquetCodec, std::string>> cases = {
      {ParquetCodec::none, text},
      {ParquetCodec::snappy, snappy_of(text)},
      {ParquetCodec::gzip, deflate_of(text, 16 + MAX_WBITS)},
      {ParquetCodec::gzip, deflate_of(text, MAX_WBITS)},  // zlib framing, which some writers use
      {ParquetCodec::zstd, zstd_of(text)},
  };
  for (const auto& [codec, compressed] : cases) {
    std::string out;
    parquet_decompress(codec, bytes_of(compressed), text.size(), out, "test page");
    EXPECT_EQ(out, text) << parquet_codec_name(static_cast<int32_t>(codec));
    EXPECT_LT(compressed.size(), codec == ParquetCodec::none ? text.size() + 1 : text.size() / 4);
  }
}

TEST(ParquetCodec, DamagedDataWrongSizesAndOtherCodecsAreRefused) {
  const std::string text = page_text();
  std::string out;
  const std::string gz = deflate_of(text, 16 + MAX_WBITS), zs = zstd_of(text), sn = snappy_of(text);
  const std::vector<std::tuple<ParquetCodec, std::string, size_t, std::string>> cases = {
      {ParquetCodec::none, text, text.size() + 1, "uncompressed page"},
      {ParquetCodec::snappy, sn, text.size() - 1, "SNAPPY"},
      {ParquetCodec::snappy, sn.substr(0, sn.size() / 2), text.size(), "SNAPPY"},
      {ParquetCodec::gzip, gz, text.size() + 5, "trailer says"},
      {ParquetCodec::gzip, gz.substr(0, gz.size() / 2), text.size(), "GZIP"},
      {ParquetCodec::gzip, "\x1f\x8b" + std::string(40, 'x'), text.size(), "GZIP"},
      {ParquetCodec::zstd, zs, text.size() - 3, "ZSTD"},
      {ParquetCodec::zstd, zs.substr(0, zs.size() / 2), text.size(), "ZSTD"},
      {ParquetCodec::zstd, std::string(40, 'x'), text.size(), "ZSTD"},
      {ParquetCodec::lz4_raw, text, text.size(), "LZ4_RAW, which amber does not read"},
      {ParquetCodec::brotli, text, text.size(), "BROTLI"},
  };
  for (const auto& [codec, data, size, fragment] : cases) {
    testing::expect_error([&] { parquet_decompress(codec, bytes_of(data), size, out, "test page"); },
                          {"test page", fragment});
  }
}

}  // namespace
}  // namespace amber::data
