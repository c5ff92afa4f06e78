// Corpus readers: turn files into documents. Plain text (one document per line, or
// blank-line separated paragraphs), JSONL with a chosen field or chat messages rendered
// by a template, and fortune files, each plain or gzip/zstd-compressed (recognised by
// magic bytes; text_stream.h); and Parquet files' text column (parquet_reader.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "amber/data/chat_template.h"

namespace amber::data {

// Debian's `fortunes` package: the bundled default corpus, one fortune per document.
inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

enum class CorpusFormat {
  automatic,   // *.jsonl / *.json (+ .gz/.zst) -> jsonl; a file with a line "%" -> fortune; else lines
               // (a Parquet file is recognised by its bytes whatever the format says)
  lines,       // one document per non-empty line
  paragraphs,  // documents separated by blank lines
  jsonl,       // one JSON object per line; the document is one string field
  fortune,     // documents separated by lines holding only "%"
};

CorpusFormat corpus_format_from_name(std::string_view name);  // error lists the valid names
std::string_view corpus_format_name(CorpusFormat format);

struct CorpusOptions {
  CorpusFormat format = CorpusFormat::automatic;
  // The JSONL field or Parquet column holding each document's text; with a chat
  // template, the JSONL field holding its messages.
  std::string field = "text";
  // A file in which a larger share of the document bytes is invalid UTF-8 is refused: it
  // is in another encoding or not text, and repairing it would train on U+FFFD.
  double max_invalid_utf8 = 0.01;
  // Set: each JSONL row's messages are rendered into its document (chat_template.h).
  ChatTemplate chat_template = ChatTemplate::none;
};

struct CorpusStats {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t bytes = 0;           // document bytes delivered
  int64_t repaired_bytes = 0;  // invalid UTF-8 bytes replaced by U+FFFD
  int64_t null_values = 0;     // Parquet rows whose text is null, skipped
};

// Files and directories -> the files read, in order. A directory contributes its
// regular files sorted by name, not recursing (so fortunes' off/ folder stays out),
// skipping symlinks and *.dat (fortune's index files and .u8 aliases).
std::vector<std::string> corpus_files(const std::vector<std::string>& inputs);

// Calls on_document(text) for every non-empty document, in file order (a Parquet
// file's rows in row order, nulls skipped and counted). Documents are
// valid UTF-8 (invalid bytes are replaced and counted; a file with more than
// options.max_invalid_utf8 of them fails once read). Binary files are refused before
// any document. Errors name file and line.
CorpusStats read_corpus(const std::vector<std::string>& files, const CorpusOptions& options,
                        const std::function<void(std::string&&)>& on_document);

}  // namespace amber::data
