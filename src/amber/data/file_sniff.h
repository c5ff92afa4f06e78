// What a corpus file holds, judged by its first bytes rather than its name: plain text,
// gzip or zstd to decompress, a Parquet table, or a binary format amber cannot read. A refused file is
// named with its format and how to turn it into something amber tokenize reads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace amber::data {

enum class Compression { none, gzip, zstd };

// How many leading bytes sniff_compression needs to recognise every magic it knows.
inline constexpr size_t kSniffBytes = 16;

// The compression of a file that starts with `head` (at least its first kSniffBytes bytes,
// or the whole file when shorter). Fails, naming `path`, for the binary formats it
// recognises: Parquet (a table, which read_corpus reads column-wise, not as a text
// stream), Arrow, zip, PDF, ELF, xz, bzip2, 7z.
Compression sniff_compression(std::string_view head, const std::string& path);

// Whether the file at `path` starts with Parquet's magic "PAR1" (false when it cannot be
// opened: the text reader then says so).
bool is_parquet_file(const std::string& path);

// How many bytes of decoded text check_text_start looks at.
inline constexpr int64_t kTextCheckBytes = 1024;

// Fails, naming `path`, when `text`, the decoded bytes of a file from byte `offset` on
// (within its first kTextCheckBytes), holds a NUL byte: text never does, UTF-16 and
// binary formats do.
void check_text_start(std::string_view text, int64_t offset, const std::string& path);

std::string_view compression_name(Compression compression);

}  // namespace amber::data
