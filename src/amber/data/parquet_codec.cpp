// Each codec is checked against the declared size before anything is allocated where
// its format says the size cheaply (Snappy's preamble, a zstd frame header), so a
// damaged header cannot make the reader allocate a gigabyte to fail afterwards.
#include "amber/data/parquet_codec.h"

#include <cstring>

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include "amber/core/error.h"

namespace amber::data {

std::string parquet_codec_name(int32_t codec) {
  static const char* const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  if (codec >= 0 && codec < 8) return names[codec];
  return concat("codec number ", codec);
}

bool parquet_codec_supported(int32_t codec) {
  const auto c = static_cast<ParquetCodec>(codec);
  return c == ParquetCodec::none || c == ParquetCodec::snappy || c == ParquetCodec::gzip || c == ParquetCodec::zstd;
}

namespace {

void inflate_gzip(std::span<const uint8_t> in, std::string& out, const std::string& what) {
  z_stream z{};
  AMBER_CHECK(inflateInit2(&z, 32 + MAX_WBITS) == Z_OK, "cannot start a gzip decoder for ", what);  // gzip or zlib
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int r = Z_OK;
  while (r == Z_OK) r = inflate(&z, Z_FINISH);
  const size_t made = out.size() - z.avail_out;
  const std::string msg = z.msg ? z.msg : "";
  inflateEnd(&z);
  AMBER_CHECK(r == Z_STREAM_END && made == out.size(), what, " holds damaged GZIP data (zlib: ",
              r == Z_STREAM_END ? "size differs from the page header's" : msg.empty() ? "data ends early" : msg,
              "); the file is corrupt");
}

}  // namespace

void parquet_decompress(ParquetCodec codec, std::span<const uint8_t> in, size_t size, std::string& out,
                        const std::string& what) {
  switch (codec) {
    case ParquetCodec::none:
      AMBER_CHECK(in.size() == size, what, " is damaged: an uncompressed page of ", in.size(),
                  " bytes whose header says ", size);
      out.assign(reinterpret_cast<const char*>(in.data()), in.size());
      return;
    case ParquetCodec::snappy: {
      const char* src = reinterpret_cast<const char*>(in.data());
      size_t claimed = 0;
      AMBER_CHECK(snappy_uncompressed_length(src, in.size(), &claimed) == SNAPPY_OK && claimed == size, what,
                  " holds damaged SNAPPY data (its length preamble disagrees with the page header); the file is corrupt");
      out.resize(size);
      size_t made = size;
      AMBER_CHECK(snappy_uncompress(src, in.size(), out.data(), &made) == SNAPPY_OK && made == size, what,
                  " holds damaged SNAPPY data; the file is corrupt");
      return;
    }
    case ParquetCodec::gzip:
      // A gzip member ends with its size modulo 2^32: check it before allocating.
      if (in.size() >= 18 && in[0] == 0x1f && in[1] == 0x8b) {
        uint32_t isize = 0;
        std::memcpy(&isize, in.data() + in.size() - 4, 4);  // little-endian, as x86 and ARM are
        AMBER_CHECK(isize == static_cast<uint32_t>(size), what, " holds damaged GZIP data (its trailer says ",
                    isize, " bytes, the page header ", size, "); the file is corrupt");
      }
      out.resize(size);
      inflate_gzip(in, out, what);
      return;
    case ParquetCodec::zstd: {
      const unsigned long long claimed = ZSTD_getFrameContentSize(in.data(), in.size());
      AMBER_CHECK(claimed != ZSTD_CONTENTSIZE_ERROR, what, " holds damaged ZSTD data (no frame header); the file is ",
                  "corrupt");
      AMBER_CHECK(claimed == ZSTD_CONTENTSIZE_UNKNOWN || claimed == size, what, " holds damaged ZSTD data (its frame ",
                  "says ", claimed, " bytes, the page header ", size, "); the file is corrupt");
      out.resize(size);
      const size_t made = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
      AMBER_CHECK(!ZSTD_isError(made) && made == size, what, " holds damaged ZSTD data (zstd: ",
                  ZSTD_isError(made) ? ZSTD_getErrorName(made) : "size differs from the page header's",
                  "); the file is corrupt");
      return;
    }
    case ParquetCodec::lzo:
    case ParquetCodec::brotli:
    case ParquetCodec::lz4:
    case ParquetCodec::lz4_raw:
      break;
  }
  fail(what, " is compressed with ", parquet_codec_name(static_cast<int32_t>(codec)),
       ", which amber does not read (it reads UNCOMPRESSED, SNAPPY, GZIP and ZSTD)");
}

}  // namespace amber::data
