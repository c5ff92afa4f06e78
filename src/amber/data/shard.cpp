// Layout is little-endian and 8-byte aligned throughout, so the checksum folds whole
// 64-bit words and the reader can use the mapped offsets in place.
#include "amber/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "amber/core/error.h"

namespace amber::data {
namespace {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swapping to port");

constexpr size_t kChecksumOffset = 40;

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }

// Each word enters through a bijection of the running state (xor, odd multiply,
// rotate, odd multiply), so any change confined to one 64-bit word always changes
// the result; wider damage escapes only with probability ~2^-64.
struct Checksum {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = std::rotl((h ^ w) * 0x9FB21C651E98DF25ull, 29) * 0xC2B2AE3D27D4EB4Full;
    }
  }
};

// Header words 0..4 and 6..7 (everything but the checksum itself), then the payload.
uint64_t checksum_of(const unsigned char* file, size_t size) {
  Checksum c;
  c.add(file, kChecksumOffset);
  c.add(file + kChecksumOffset + 8, size - kChecksumOffset - 8);
  return c.h;
}

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t num_docs;
  uint64_t num_tokens;
  uint32_t vocab_size;
  uint32_t reserved0;
  uint64_t checksum;
  uint64_t reserved[2];
};
static_assert(sizeof(Header) == kShardHeaderBytes);
static_assert(offsetof(Header, checksum) == kChecksumOffset);

}  // namespace

uint64_t write_shard(const std::string& path, std::span<const int32_t> tokens, std::span<const uint64_t> doc_offsets,
                 int32_t vocab_size) {
  AMBER_CHECK(!doc_offsets.empty() && doc_offsets.front() == 0 && doc_offsets.back() == tokens.size(),
              "write_shard ", path, ": document offsets must run from 0 to the token count");
  AMBER_CHECK(vocab_size > 0, "write_shard ", path, ": vocab_size must be positive");
  Header h{};
  std::memcpy(h.magic, kShardMagic, 8);
  h.version = kShardVersion;
  h.token_bytes = vocab_size <= 65536 ? 2 : 4;
  h.num_docs = doc_offsets.size() - 1;
  h.num_tokens = tokens.size();
  h.vocab_size = static_cast<uint32_t>(vocab_size);

  const size_t token_area = align8(tokens.size() * h.token_bytes);
  const size_t size = kShardHeaderBytes + token_area + doc_offsets.size() * 8;
  std::vector<unsigned char> file(size, 0);
  unsigned char* tok = file.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    AMBER_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "write_shard ", path, ": token ", tokens[i],
                " at position ", i, " is outside the vocabulary [0, ", vocab_size, ")");
    if (h.token_bytes == 2) {
      const auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(tok + 2 * i, &v, 2);
    } else {
      std::memcpy(tok + 4 * i, &tokens[i], 4);
    }
  }
  std::memcpy(tok + token_area, doc_offsets.data(), doc_offsets.size() * 8);
  std::memcpy(file.data(), &h, sizeof(h));
  h.checksum = checksum_of(file.data(), size);
  std::memcpy(file.data(), &h, sizeof(h));

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    AMBER_CHECK(out.good(), "cannot write shard ", tmp, "; check that the folder exists and is writable");
    out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(size));
    out.flush();
    AMBER_CHECK(out.good(), "writing shard ", tmp, " failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  AMBER_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
  return h.checksum;
}

Shard Shard::open(const std::string& path, bool verify) {
  const std::string fix = "; the shard is damaged or incomplete: delete it and re-run amber tokenize";
  const int fd = ::open(path.c_str(), O_RDONLY);
  AMBER_CHECK(fd >= 0, "cannot open shard ", path, ": ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    fail("shard ", path, " is truncated: ", size, " bytes, shorter than its ", kShardHeaderBytes, "-byte header", fix);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  AMBER_CHECK(map != MAP_FAILED, "cannot map shard ", path, ": ", std::strerror(errno));
  Shard s;
  s.path_ = path;
  s.mapping_ = std::shared_ptr<const void>(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  const auto* file = static_cast<const unsigned char*>(map);
  Header h;
  std::memcpy(&h, file, sizeof(h));
  AMBER_CHECK(std::memcmp(h.magic, kShardMagic, 8) == 0, "shard ", path,
              " does not start with the magic AMBRSHRD; it is not an amber token shard", fix);
  AMBER_CHECK(h.version == kShardVersion, "shard ", path, " has format version ", h.version, "; this amber reads version ",
              kShardVersion, fix);
  AMBER_CHECK(h.token_bytes == 2 || h.token_bytes == 4, "shard ", path, " declares ", h.token_bytes,
              "-byte tokens (must be 2 or 4)", fix);
  AMBER_CHECK(h.num_tokens < (1ull << 40) && h.num_docs < (1ull << 36), "shard ", path, " declares ", h.num_docs,
              " documents and ", h.num_tokens, " tokens, which cannot be right", fix);
  const size_t token_area = align8(h.num_tokens * h.token_bytes);
  const size_t expected = kShardHeaderBytes + token_area + (h.num_docs + 1) * 8;
  AMBER_CHECK(size == expected, "shard ", path, " is ", size, " bytes but its header implies ", expected,
              size < expected ? " (truncated)" : " (trailing bytes)", fix);
  if (verify) {
    AMBER_CHECK(checksum_of(file, size) == h.checksum, "shard ", path, " fails its checksum (corrupted)", fix);
  }
  s.tokens_ = file + kShardHeaderBytes;
  s.offsets_ = reinterpret_cast<const uint64_t*>(file + kShardHeaderBytes + token_area);
  s.num_docs_ = static_cast<int64_t>(h.num_docs);
  s.num_tokens_ = static_cast<int64_t>(h.num_tokens);
  s.vocab_size_ = static_cast<int32_t>(h.vocab_size);
  s.token_bytes_ = static_cast<int>(h.token_bytes);
  s.checksum_ = h.checksum;
  AMBER_CHECK(s.offsets_[0] == 0 && s.offsets_[h.num_docs] == h.num_tokens, "shard ", path,
              " has document offsets that do not span its tokens", fix);
  for (uint64_t d = 0; d < h.num_docs; ++d) {
    AMBER_CHECK(s.offsets_[d] <= s.offsets_[d + 1], "shard ", path, " has decreasing document offsets at document ",
                d, fix);
  }
  return s;
}

void Shard::read(int64_t doc, int64_t start, int64_t count, int32_t* out) const {
  AMBER_CHECK(doc >= 0 && doc < num_docs_ && start >= 0 && count >= 0 && start + count <= doc_length(doc), "shard ",
              path_, ": read of document ", doc, " tokens [", start, ", ", start + count, ") is out of range");
  if (count == 0) return;  // an empty document's buffer may be null
  const uint64_t first = offsets_[doc] + static_cast<uint64_t>(start);
  if (token_bytes_ == 2) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, tokens_ + 2 * (first + i), 2);
      out[i] = v;
    }
  } else {
    std::memcpy(out, tokens_ + 4 * first, static_cast<size_t>(count) * 4);
  }
}

std::vector<int32_t> Shard::document(int64_t doc) const {
  std::vector<int32_t> out(static_cast<size_t>(doc_length(doc)));
  read(doc, 0, doc_length(doc), out.data());
  return out;
}

}  // namespace amber::data
