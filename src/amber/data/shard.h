// Token shards: the on-disk format of a tokenized corpus (header, tokens, document
// offsets, checksum; docs/data.md has the byte layout), a writer that never leaves a
// partial file behind, and a memory-mapped reader that rejects damaged files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace amber::data {

inline constexpr char kShardMagic[8] = {'A', 'M', 'B', 'R', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

// Writes `path` via `path.tmp` + rename. doc_offsets has num_docs + 1 entries, starts
// at 0 and ends at tokens.size(). Tokens are stored as u16 when vocab_size <= 65536.
// Returns the checksum written into the header.
uint64_t write_shard(const std::string& path, std::span<const int32_t> tokens, std::span<const uint64_t> doc_offsets,
                 int32_t vocab_size);

class Shard {
 public:
  // Maps the file and checks magic, version, size, offsets and (with verify) the
  // checksum; every failure names the file and says to regenerate it.
  static Shard open(const std::string& path, bool verify = true);

  const std::string& path() const { return path_; }
  int64_t num_docs() const { return num_docs_; }
  int64_t num_tokens() const { return num_tokens_; }
  int32_t vocab_size() const { return vocab_size_; }
  int token_bytes() const { return token_bytes_; }
  uint64_t checksum() const { return checksum_; }  // as stored in the header; manifest.json records it
  int64_t doc_length(int64_t doc) const { return static_cast<int64_t>(offsets_[doc + 1] - offsets_[doc]); }
  // Copies `count` tokens of document `doc` starting at token `start` into out.
  void read(int64_t doc, int64_t start, int64_t count, int32_t* out) const;
  std::vector<int32_t> document(int64_t doc) const;

 private:
  std::string path_;
  std::shared_ptr<const void> mapping_;  // unmaps when the last copy goes
  const unsigned char* tokens_ = nullptr;
  const uint64_t* offsets_ = nullptr;
  int64_t num_docs_ = 0;
  int64_t num_tokens_ = 0;
  int32_t vocab_size_ = 0;
  int token_bytes_ = 0;
  uint64_t checksum_ = 0;
};

}  // namespace amber::data
