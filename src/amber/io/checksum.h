// File checksums for checkpoint integrity: XXH64 (seed 0) over a file's bytes, written
// as "xxh64:<16 hex digits>". Fast enough to hash a multi-gigabyte checkpoint at disk
// speed; it catches damage (flipped bits, truncation), not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace amber {

uint64_t xxh64(const void* data, size_t size);

// "xxh64:..." of the whole file at `path`; an error naming it when it cannot be read.
std::string file_checksum(const std::string& path);

}  // namespace amber
