// Fuzz target: the corpus reader, from the file's first bytes (plain, gzip, zstd, Parquet
// or a refused binary format) through decompression or the Parquet footer, pages and
// codecs to documents, as JSONL when the input's size is odd (chat rows rendered by a
// template when it is 5 modulo 8) and by the automatic rules (lines or fortunes) otherwise.
#include "amber/data/corpus.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = amber::fuzz::input_file(data, size, "corpus.txt");
  amber::data::CorpusOptions options;
  options.format = size % 2 ? amber::data::CorpusFormat::jsonl : amber::data::CorpusFormat::automatic;
  options.max_invalid_utf8 = size % 4 < 2 ? 1.0 : 0.01;
  if (size % 8 == 5) {
    options.chat_template = amber::data::ChatTemplate::chatml;
    options.field = "messages";
  }
  try {
    amber::data::read_corpus({path}, options, [](std::string&& doc) {});
  } catch (const amber::Error&) {
  }
  return 0;
}
