// Magic numbers are matched exactly at offset 0; anything else that is binary is caught
// afterwards by the NUL-byte check on the decoded text.
#include "amber/data/file_sniff.h"

#include <fstream>

#include "amber/core/error.h"

namespace amber::data {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

struct Refused {
  std::string_view magic;
  const char* what;
  const char* advice;
};

constexpr std::string_view kParquet = "PAR1";

// Formats a corpus may arrive in that amber cannot read, each with a way out.
const Refused kRefused[] = {
    {"ARROW1", "an Arrow IPC file", "write its text column out as JSONL (pyarrow.ipc.open_file(...).read_pandas())"},
    {std::string_view("PK\x03\x04", 4), "a zip archive", "unpack it and pass the files inside"},
    {"%PDF", "a PDF document", "extract its text first (e.g. pdftotext FILE FILE.txt)"},
    {std::string_view("\x7f" "ELF", 4), "an ELF executable or library", "pass text or JSONL files"},
    {std::string_view("\xfd" "7zXZ\x00", 6), "xz-compressed", "decompress it (xz -d) or recompress it with gzip or zstd"},
    {std::string_view("7z\xbc\xaf\x27\x1c", 6), "a 7z archive", "unpack it and pass the files inside"},
};

bool is_bzip2(std::string_view head) {
  // "BZh", the block size digit, then the first block's magic (digits of pi).
  return head.size() >= 10 && starts_with(head, "BZh") && head[3] >= '1' && head[3] <= '9' &&
         head.substr(4, 6) == "1AY&SY";
}

}  // namespace

Compression sniff_compression(std::string_view head, const std::string& path) {
  if (starts_with(head, "\x1f\x8b")) return Compression::gzip;
  if (starts_with(head, "\x28\xb5\x2f\xfd")) return Compression::zstd;
  if (starts_with(head, kParquet)) {
    fail("corpus file ", path, " is Parquet, a table, not a text stream; read_corpus reads its text column ",
         "(--field) with the Parquet reader");
  }
  for (const Refused& r : kRefused) {
    if (starts_with(head, r.magic)) fail("corpus file ", path, " is ", r.what, ", not text; ", r.advice);
  }
  if (is_bzip2(head)) {
    fail("corpus file ", path, " is bzip2-compressed, which amber does not read; decompress it (bzip2 -d) ",
         "or recompress it with gzip or zstd");
  }
  return Compression::none;
}

void check_text_start(std::string_view text, int64_t offset, const std::string& path) {
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return;
  fail("corpus file ", path, " looks binary, not text: byte ", offset + static_cast<int64_t>(nul),
       " (after any decompression) is NUL; amber reads UTF-8 text and JSONL, plain or gzip/zstd-compressed ",
       "(UTF-16 text: convert it with iconv -f UTF-16 -t UTF-8)");
}

bool is_parquet_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {};
  in.read(head, sizeof(head));
  return in.gcount() == 4 && std::string_view(head, 4) == kParquet;
}

std::string_view compression_name(Compression compression) {
  switch (compression) {
    case Compression::gzip:
      return "gzip";
    case Compression::zstd:
      return "zstd";
    case Compression::none:
      break;
  }
  return "none";
}

}  // namespace amber::data
