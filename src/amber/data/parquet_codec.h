// The page compression codecs of Parquet that amber reads: none, Snappy (Debian's
// libsnappy), GZIP (zlib) and ZSTD (libzstd). A page decompresses to exactly the size
// its header states, or the file is refused as corrupt.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace amber::data {

// Parquet's CompressionCodec numbers.
enum class ParquetCodec : int32_t { none = 0, snappy = 1, gzip = 2, lzo = 3, brotli = 4, lz4 = 5, zstd = 6, lz4_raw = 7 };

// Parquet's own name of a codec number (any int32, unknown ones included).
std::string parquet_codec_name(int32_t codec);
bool parquet_codec_supported(int32_t codec);

// Decompresses `in` into `out`, which it resizes to `size`; fails, naming `what`
// ("page 2 of column text in data.parquet"), on damaged data or another size.
void parquet_decompress(ParquetCodec codec, std::span<const uint8_t> in, size_t size, std::string& out,
                        const std::string& what);

}  // namespace amber::data
