// A corpus file as a stream of lines, decompressing gzip or zstd on the fly (chosen by
// the file's magic bytes, not its name) in constant memory, so a multi-gigabyte
// .jsonl.zst never has to fit in memory or on disk uncompressed.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "amber/data/file_sniff.h"

namespace amber::data {

class TextDecoder;  // zlib or zstd state (text_stream.cpp)

class TextStream {
 public:
  // Opens and sniffs `path`; fails naming it when it cannot be opened or is a binary
  // format (file_sniff.h).
  explicit TextStream(const std::string& path);
  ~TextStream();
  TextStream(const TextStream&) = delete;
  TextStream& operator=(const TextStream&) = delete;

  // The next line without its '\n' (a last line without one counts); false at the end.
  // Corrupt or truncated compressed data fails naming the file.
  bool getline(std::string& line);

  Compression compression() const { return compression_; }

 private:
  // Appends the next decoded bytes to out_; false when the file is exhausted.
  bool fill();
  // Reads the next raw bytes of the file into in_; returns how many.
  size_t read_raw();

  std::string path_;
  std::ifstream file_;
  Compression compression_ = Compression::none;
  std::unique_ptr<TextDecoder> decoder_;  // absent for plain files
  std::string in_;        // raw bytes read but not yet decoded
  size_t in_pos_ = 0;
  std::string out_;       // decoded bytes not yet returned as lines
  size_t out_pos_ = 0;
  int64_t decoded_ = 0;   // decoded bytes so far, for the binary check of the start
  bool raw_eof_ = false;
};

}  // namespace amber::data
