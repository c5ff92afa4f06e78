// `amber tokenize`: a corpus to token shards with a held-out validation split, on all
// threads, restartable after a crash (complete shards are kept, partial ones redone).
#include <chrono>
#include <iostream>

#include <omp.h>

#include "amber/core/error.h"
#include "amber/data/tokenize_corpus.h"
#include "amber/data/tokenizer_json.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::vector<std::string> inputs{data::kDefaultCorpus};
  data::TokenizeCorpusOptions options;
  std::string format = "auto";
  std::string chat_template;
  double shard_mb = 256;
  int threads = 0;
};

void run_tokenize(TokenizeArgs a, bool field_given) {
  const auto start = std::chrono::steady_clock::now();
  if (a.threads > 0) omp_set_num_threads(a.threads);
  a.options.corpus.format = data::corpus_format_from_name(a.format);
  if (!a.chat_template.empty()) {
    a.options.corpus.chat_template = data::chat_template_from_name(a.chat_template);
    if (!field_given) a.options.corpus.field = "messages";
  }
  a.options.inputs.clear();
  for (const std::string& input : a.inputs) a.options.inputs.push_back(data::parse_corpus_input(input));
  // Bounded (NaN included) so that the byte count fits int64 and a shard is at least one byte.
  AMBER_CHECK(a.shard_mb >= 0.001 && a.shard_mb <= 1048576, "--shard-mb is ", a.shard_mb,
              "; give the text megabytes per shard, from 0.001 to 1048576");
  a.options.shard_bytes = static_cast<int64_t>(a.shard_mb * (1 << 20));
  const data::Tokenizer tokenizer = data::load_tokenizer_json(a.tokenizer);
  std::cerr << "tokenize: " << a.options.inputs.size() << " input(s) -> " << a.options.out_dir << " on "
            << omp_get_max_threads() << " threads\n";
  const data::TokenizeCorpusReport r = data::tokenize_corpus(
      tokenizer, a.options, [](const std::string& line) { std::cerr << "tokenize: " << line << "\n"; });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "tokenize: train " << r.train_docs << " documents / " << r.train_tokens << " tokens, val "
            << r.val_docs << " documents / " << r.val_tokens << " tokens; " << r.shards_written << " shards written, "
            << r.shards_reused << " kept; ";
  if (r.null_values > 0) std::cerr << r.null_values << " null texts skipped; ";
  std::cerr << r.text_bytes / 1e6 / seconds << " MB/s over " << seconds << " s\n";
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Tokenize a corpus into token shards with a validation split");
  cmd->add_option("--tokenizer", args->tokenizer, "A Hugging Face tokenizer.json (e.g. from amber tokenizer train)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--input", args->inputs,
                  "Corpus files or folders: text or JSONL, plain or gzip/zstd-compressed, or Parquet (default: "
                  "Debian's fortunes); PATH:WEIGHT writes each of its documents WEIGHT times on average (0.5: about "
                  "half of them)");
  cmd->add_option("--format", args->format,
                  "Format of text files: auto, lines, paragraphs, jsonl, fortune (Parquet is known by its bytes)")
      ->capture_default_str();
  auto* field = cmd->add_option("--field", args->options.corpus.field,
                                "JSONL field or Parquet column holding the text (with --chat-template: the JSONL "
                                "field holding the messages, default messages)")
                    ->capture_default_str();
  cmd->add_option("--chat-template", args->chat_template,
                  "Render each JSONL row's messages ([{role, content}, ...]) as one document: chatml or llama3");
  cmd->add_option("--max-invalid-utf8", args->options.corpus.max_invalid_utf8,
                  "Largest share of a file's document bytes that may be invalid UTF-8 (replaced by U+FFFD)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--out", args->options.out_dir, "Output folder for shards and manifest.json")->required();
  cmd->add_option("--val-fraction", args->options.val_fraction, "Share of documents held out (by hash of the text)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--val-seed", args->options.val_seed, "Seed of the validation hash")->capture_default_str();
  cmd->add_option("--shard-mb", args->shard_mb, "Text megabytes per shard, 0.001 to 1048576")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Tokenizer threads (default: all cores)");
  cmd->callback([args, field] { run_tokenize(*args, field->count() > 0); });
}

}  // namespace amber::cli
