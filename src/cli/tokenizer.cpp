// `amber tokenizer train|encode|decode`: learn a byte-level BPE from a corpus, and check
// any tokenizer.json from the shell (text on stdin -> JSON ids, and back).
#include <chrono>
#include <climits>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
#include "amber/data/bpe_trainer.h"
#include "amber/data/corpus.h"
#include "amber/data/tokenizer_json.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct TrainArgs {
  std::vector<std::string> inputs{data::kDefaultCorpus};
  std::string format = "auto";
  std::string field = "text";
  bool field_given = false;
  std::string chat_template;
  double max_invalid_utf8 = data::CorpusOptions{}.max_invalid_utf8;
  int32_t vocab_size = 8192;
  std::vector<std::string> specials;
  std::string pretokenizer = "llama3";
  int64_t min_frequency = 2;
  std::string out;
};

void run_train(const TrainArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  // --out's folder before the corpus is read: a bad path fails now, not after training.
  const std::filesystem::path out_dir = std::filesystem::path(a.out).parent_path();
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) fail("--out: cannot create the folder ", out_dir.string(), " (", ec.message(), ")");
  }
  data::BpeTrainerOptions options;
  options.vocab_size = a.vocab_size;
  options.min_frequency = a.min_frequency;
  for (const std::string& s : a.specials) options.special_tokens.push_back(s);
  if (a.pretokenizer == "llama3") options.pre_tokenizer = data::PreTokenizer::llama3();
  else if (a.pretokenizer == "gpt2") options.pre_tokenizer = data::PreTokenizer::gpt2();
  else fail("--pretokenizer is \"", a.pretokenizer, "\"; use llama3 or gpt2");
  options.on_progress = [](int32_t done, int32_t target) {
    std::cerr << "\rtokenizer train: " << done << " / " << target << " merges" << std::flush;
  };
  data::BpeTrainer trainer(options);

  data::CorpusOptions corpus;
  corpus.format = data::corpus_format_from_name(a.format);
  corpus.field = a.field;
  if (!a.chat_template.empty()) {
    corpus.chat_template = data::chat_template_from_name(a.chat_template);
    if (!a.field_given) corpus.field = "messages";
  }
  corpus.max_invalid_utf8 = a.max_invalid_utf8;
  std::vector<std::string> batch;
  const data::CorpusStats stats = data::read_corpus(data::corpus_files(a.inputs), corpus, [&](std::string&& doc) {
    batch.push_back(std::move(doc));
    if (batch.size() == 16384) {
      trainer.add_documents(batch);
      batch.clear();
    }
  });
  trainer.add_documents(batch);
  AMBER_CHECK(stats.documents > 0, "the corpus holds no documents; check --input and --format");
  std::cerr << "tokenizer train: " << stats.documents << " documents, " << stats.bytes << " bytes from "
            << stats.files << " files, " << trainer.distinct_pieces() << " distinct pieces\n";
  const data::Tokenizer tokenizer = trainer.train();
  data::save_tokenizer_json(tokenizer, a.out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "\ntokenizer train: wrote " << a.out << " (" << tokenizer.vocab_size() << " tokens, "
            << tokenizer.model().merges().size() << " merges) in " << seconds << " s\n";
}

std::string read_stdin() {
  std::ostringstream all;
  all << std::cin.rdbuf();
  return all.str();
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Train a byte-level BPE tokenizer, or encode/decode with one");
  cmd->require_subcommand(1);

  auto args = std::make_shared<TrainArgs>();
  auto* train = cmd->add_subcommand("train", "Learn byte-level BPE merges from a corpus and write tokenizer.json");
  train->add_option("--input", args->inputs,
                    "Corpus files or folders: text or JSONL, plain or gzip/zstd-compressed, or Parquet (default: "
                    "Debian's fortunes)");
  train->add_option("--format", args->format,
                    "Format of text files: auto, lines, paragraphs, jsonl, fortune (Parquet is known by its bytes)")
      ->capture_default_str();
  auto* field = train->add_option("--field", args->field,
                                  "JSONL field or Parquet column holding the text (with --chat-template: the JSONL "
                                  "field holding the messages, default messages)")
                    ->capture_default_str();
  train->add_option("--chat-template", args->chat_template,
                    "Render each JSONL row's messages ([{role, content}, ...]) as one document: chatml or llama3 "
                    "(pass its markers as --special too)");
  train->add_option("--max-invalid-utf8", args->max_invalid_utf8,
                    "Largest share of a file's document bytes that may be invalid UTF-8 (replaced by U+FFFD)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  train->add_option("--vocab-size", args->vocab_size,
                    "Total vocabulary: 256 bytes + merges + special tokens")
      ->capture_default_str()
      ->check(CLI::Range(259, 1 << 24));
  train->add_option("--special", args->specials,
                    "Extra special tokens (never split), after <|bos|> <|eos|> <|pad|>; comma-separated or repeated")
      ->delimiter(',');
  train->add_option("--pretokenizer", args->pretokenizer, "Piece splitting: llama3 (Split+ByteLevel) or gpt2 (ByteLevel)")
      ->capture_default_str();
  train->add_option("--min-frequency", args->min_frequency, "Never merge a pair seen fewer times")
      ->capture_default_str();
  train->add_option("--out", args->out, "Where to write tokenizer.json")->required();
  train->callback([args, field] {
    args->field_given = field->count() > 0;
    run_train(*args);
  });

  auto tokenizer_path = std::make_shared<std::string>();
  auto* encode = cmd->add_subcommand("encode", "Read UTF-8 text on stdin, print its token ids as a JSON array");
  encode->add_option("--tokenizer", *tokenizer_path, "A Hugging Face tokenizer.json")->required();
  encode->callback([tokenizer_path] {
    const data::Tokenizer tokenizer = data::load_tokenizer_json(*tokenizer_path);
    std::cout << nlohmann::json(tokenizer.encode(read_stdin())).dump() << "\n";
  });

  auto* decode = cmd->add_subcommand("decode", "Read a JSON array of token ids on stdin, print the text");
  decode->add_option("--tokenizer", *tokenizer_path, "A Hugging Face tokenizer.json")->required();
  decode->callback([tokenizer_path] {
    const data::Tokenizer tokenizer = data::load_tokenizer_json(*tokenizer_path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_stdin());
    } catch (const nlohmann::json::parse_error& e) {
      fail("stdin is not JSON (", e.what(), "); pass a JSON array of token ids");
    }
    AMBER_CHECK(j.is_array(), "stdin must be a JSON array of token ids");
    std::vector<int32_t> ids;
    for (const auto& v : j) {
      AMBER_CHECK(v.is_number_integer(), "stdin: every element must be an integer token id, got ", v.dump());
      // Checked before narrowing: 2^32 + 1 must not decode as id 1.
      const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT32_MAX}
                                               : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
      AMBER_CHECK(fits, "stdin: token id ", v.dump(), " is outside the vocabulary [0, ", tokenizer.vocab_size(), ")");
      ids.push_back(v.get<int32_t>());
    }
    std::cout << tokenizer.decode(ids);
  });
}

}  // namespace amber::cli
