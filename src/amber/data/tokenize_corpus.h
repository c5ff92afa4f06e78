// Corpus -> token shards: documents are grouped in input order, split into train and
// validation by a stable hash of their text, tokenized on all threads and written as
// shards plus a manifest. Re-running after a crash reuses every shard already complete.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "amber/data/corpus.h"
#include "amber/data/mixture.h"
#include "amber/data/tokenizer.h"

namespace amber::data {

struct TokenizeCorpusOptions {
  std::vector<CorpusInput> inputs{{kDefaultCorpus}};  // a folder's weight holds for each of its files
  CorpusOptions corpus;
  std::string out_dir;
  double val_fraction = 0.01;  // share of documents held out for validation
  uint64_t val_seed = 0;       // changes which documents are held out
  int64_t shard_bytes = int64_t{256} << 20;  // text bytes per shard (before tokenizing)
};

struct TokenizeCorpusReport {
  int64_t train_docs = 0, val_docs = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t text_bytes = 0;
  int64_t null_values = 0;  // Parquet rows with a null text, skipped
  int shards_written = 0, shards_reused = 0;
};

// True when the document goes to the validation split: a hash of its bytes (so copies
// of one text always land together), independent of order, epoch and thread count.
// 64-bit FNV-1a of the tokenizer's canonical tokenizer.json (as tokenizer_to_json writes
// it), in hex: the file's spacing and key order do not change it, any token, merge,
// added token or pre-tokenizer setting does.
std::string tokenizer_fingerprint(const Tokenizer& tokenizer);

bool is_validation_document(std::string_view text, double val_fraction, uint64_t val_seed);

TokenizeCorpusReport tokenize_corpus(const Tokenizer& tokenizer, const TokenizeCorpusOptions& options,
                                     const std::function<void(const std::string&)>& on_progress = {});

// The shard files of a split ("train" or "val") listed in DIR/manifest.json, which
// tokenize_corpus writes last: a folder without it was never finished. Empty for a
// split without documents (the val split of --val-fraction 0).
std::vector<std::string> list_shards(const std::string& dir, const std::string& split);

struct ShardSetCheck {
  int64_t vocab_size = 0;  // of the tokenizer that made the shards; 0 when the manifest does not say
  std::string notice;      // one line when the manifest predates identity checks, else empty
};

// Checks DIR's shards against its manifest.json before training: the tokenizer that made
// them (fingerprint and vocabulary size) against `tokenizer` when one is given, and every
// listed shard's document and token counts and header checksum against its entry, so a
// file swapped between splits or replaced is refused with its name. A manifest from an
// older amber (no fingerprint, no checksums) still passes, with a notice.
ShardSetCheck check_shards(const std::string& dir, const Tokenizer* tokenizer, const std::string& tokenizer_path);

}  // namespace amber::data
