// Shard k of a split always holds the same documents for the same inputs and settings
// (grouping is by text bytes in input order), which is what makes restarts safe: a
// settings.json written first refuses a restart with different settings.
#include "amber/data/tokenize_corpus.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "amber/core/error.h"
#include "amber/data/permutation.h"
#include "amber/data/shard.h"
#include "amber/data/token_counts.h"
#include "amber/data/tokenizer_json.h"

namespace amber::data {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// indent -1: one line (the token counts, one number per id).
void write_json_atomically(const std::string& path, const ojson& j, int indent = 2) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    AMBER_CHECK(out.good(), "cannot write ", tmp);
    out << j.dump(indent) << "\n";
    AMBER_CHECK(out.good(), "writing ", tmp, " failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  AMBER_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

struct Group {
  std::string split;
  int index = 0;
  std::vector<std::string> docs;
  std::vector<std::pair<size_t, int64_t>> origins;  // per document: corpus file and index within it
  int64_t bytes = 0;
};

struct ShardEntry {
  std::string file;
  int64_t docs, tokens;
  uint64_t checksum;
};

std::string hex64(uint64_t v) { return concat(std::hex, v); }

}  // namespace

std::string tokenizer_fingerprint(const Tokenizer& tokenizer) {
  return hex64(fnv1a64(tokenizer_to_json(tokenizer).dump()));
}

bool is_validation_document(std::string_view text, double val_fraction, uint64_t val_seed) {
  return text_fraction(text, val_seed) < val_fraction;
}

TokenizeCorpusReport tokenize_corpus(const Tokenizer& tokenizer, const TokenizeCorpusOptions& options,
                                     const std::function<void(const std::string&)>& on_progress) {
  AMBER_CHECK(!options.out_dir.empty(), "tokenize: an output folder is required (--out)");
  AMBER_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, "tokenize: --val-fraction must be in [0, 1), got ",
              options.val_fraction);
  AMBER_CHECK(options.shard_bytes > 0, "tokenize: shard size must be positive");
  std::vector<std::string> files;
  std::vector<double> weights;  // per file, its input's
  for (const CorpusInput& input : options.inputs) {
    for (std::string& file : corpus_files({input.path})) {
      files.push_back(std::move(file));
      weights.push_back(input.weight);
    }
  }
  const bool weighted = std::any_of(weights.begin(), weights.end(), [](double w) { return w != 1; });
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  AMBER_CHECK(!ec, "cannot create output folder ", options.out_dir, ": ", ec.message());

  ojson settings;
  settings["tokenizer_fingerprint"] = tokenizer_fingerprint(tokenizer);
  settings["inputs"] = files;
  // Sizes catch an input edited in place between a crash and the restart.
  std::vector<uintmax_t> sizes;
  for (const std::string& f : files) {
    sizes.push_back(fs::file_size(f, ec));
    AMBER_CHECK(!ec, "cannot read the size of corpus file ", f, ": ", ec.message());
  }
  settings["input_sizes"] = sizes;
  if (weighted) settings["input_weights"] = weights;  // absent when unweighted, as older amber wrote it
  settings["format"] = corpus_format_name(options.corpus.format);
  settings["jsonl_field"] = options.corpus.field;  // the key older amber wrote, so their restarts still match
  // Absent without a template, as older amber wrote it.
  if (options.corpus.chat_template != ChatTemplate::none) {
    settings["chat_template"] = chat_template_name(options.corpus.chat_template);
  }
  settings["val_fraction"] = options.val_fraction;
  settings["val_seed"] = options.val_seed;
  settings["shard_bytes"] = options.shard_bytes;
  const std::string settings_path = (fs::path(options.out_dir) / "settings.json").string();
  if (fs::exists(settings_path)) {
    std::ifstream in(settings_path);
    ojson old;
    try {
      old = ojson::parse(in);
    } catch (const ojson::parse_error&) {
      fail(settings_path, " is not valid JSON; delete the folder's contents or choose another --out");
    }
    AMBER_CHECK(old == settings, options.out_dir, " holds shards made with different settings (",
                settings_path, " differs: tokenizer, inputs, format, val split or shard size); use a fresh --out");
  } else {
    write_json_atomically(settings_path, settings);
  }
  const std::string manifest_path = (fs::path(options.out_dir) / "manifest.json").string();
  fs::remove(manifest_path, ec);

  if (options.corpus.chat_template != ChatTemplate::none && on_progress) {
    std::string missing;
    for (std::string_view marker : chat_template_markers(options.corpus.chat_template)) {
      const auto& added = tokenizer.added_tokens();
      if (std::none_of(added.begin(), added.end(), [&](const AddedToken& t) { return t.content == marker; })) {
        missing += concat(missing.empty() ? "" : ",", marker);
      }
    }
    if (!missing.empty()) {
      on_progress(concat("chat template ", chat_template_name(options.corpus.chat_template), ": ", missing,
                         " are not added tokens of the tokenizer, so they are tokenized as text; to make each one ",
                         "token, train the tokenizer with --special ", missing));
    }
  }

  TokenizeCorpusReport report;
  std::vector<ShardEntry> train_shards, val_shards;
  const int32_t vocab_size = tokenizer.vocab_size();
  TokenCounts train_counts;  // the unigram baseline's, stored beside the shards
  train_counts.counts.assign(static_cast<size_t>(vocab_size), 0);

  auto flush = [&](Group& g) {
    if (g.docs.empty()) return;
    char name[64];
    std::snprintf(name, sizeof(name), "%s-%05d.bin", g.split.c_str(), g.index);
    const std::string path = (fs::path(options.out_dir) / name).string();
    Shard existing;
    bool reuse = false;
    if (fs::exists(path)) {
      try {
        existing = Shard::open(path);
        reuse = existing.num_docs() == static_cast<int64_t>(g.docs.size()) && existing.vocab_size() == vocab_size;
      } catch (const Error&) {
        reuse = false;  // damaged: rewritten below
      }
    }
    const bool val = g.split == "val";
    int64_t tokens = 0;
    uint64_t checksum = 0;
    if (reuse) {
      tokens = existing.num_tokens();
      checksum = existing.checksum();
      report.shards_reused += 1;
      if (!val)
        for (int64_t d = 0; d < existing.num_docs(); ++d) train_counts.add_document(existing.document(d));
    } else {
      std::vector<std::vector<int32_t>> ids(g.docs.size());
      // The first document (in corpus order) that cannot be tokenized, e.g. one too long
      // for the pre-tokenizer's regex, stops the run with its file and index.
      size_t failed = g.docs.size();
      std::string why;
#pragma omp parallel for schedule(dynamic, 16)
      for (size_t d = 0; d < g.docs.size(); ++d) {
        try {
          tokenizer.encode(g.docs[d], ids[d]);
        } catch (const std::exception& e) {
#pragma omp critical
          if (d < failed) {
            failed = d;
            why = e.what();
          }
        }
      }
      if (failed < g.docs.size()) {
        const auto [file, index] = g.origins[failed];
        fail("tokenize: document ", index, " (counting non-empty documents from 0) of ", files[file],
             " cannot be tokenized: ", why, "; split or remove that document and re-run (the shards already ",
             "written are kept)");
      }
      std::vector<uint64_t> offsets{0};
      std::vector<int32_t> flat;
      for (const auto& v : ids) {
        flat.insert(flat.end(), v.begin(), v.end());
        offsets.push_back(flat.size());
        if (!val) train_counts.add_document(v);
      }
      checksum = write_shard(path, flat, offsets, vocab_size);
      tokens = static_cast<int64_t>(flat.size());
      report.shards_written += 1;
    }
    (val ? val_shards : train_shards).push_back({name, static_cast<int64_t>(g.docs.size()), tokens, checksum});
    (val ? report.val_docs : report.train_docs) += static_cast<int64_t>(g.docs.size());
    (val ? report.val_tokens : report.train_tokens) += tokens;
    if (on_progress) {
      on_progress(concat(name, reuse ? " (complete, kept)" : "", ": ", g.docs.size(), " documents, ", tokens,
                         " tokens"));
    }
    g.docs.clear();
    g.origins.clear();
    g.bytes = 0;
    g.index += 1;
  };

  Group train, val;
  train.split = "train";
  val.split = "val";
  CorpusStats stats;
  for (size_t f = 0; f < files.size(); ++f) {  // one file at a time, so each document knows its file
    int64_t index = 0, written = 0;
    const CorpusStats s = read_corpus({files[f]}, options.corpus, [&](std::string&& doc) {
      Group& g = is_validation_document(doc, options.val_fraction, options.val_seed) ? val : train;
      const int copies = mixture_copies(doc, weights[f]);
      for (int c = 0; c < copies; ++c) {
        g.bytes += static_cast<int64_t>(doc.size());
        g.docs.push_back(c + 1 < copies ? doc : std::move(doc));
        g.origins.emplace_back(f, index);
        if (g.bytes >= options.shard_bytes) flush(g);
      }
      written += copies;
      index += 1;
    });
    if (weights[f] != 1 && on_progress) {
      on_progress(concat(files[f], " (weight ", weights[f], "): ", s.documents, " documents read, ", written,
                         " written"));
    }
    stats.files += s.files;
    stats.documents += s.documents;
    stats.bytes += s.bytes;
    stats.repaired_bytes += s.repaired_bytes;
    stats.null_values += s.null_values;
  }
  flush(train);
  flush(val);
  report.text_bytes = stats.bytes;
  report.null_values = stats.null_values;
  AMBER_CHECK(stats.documents > 0, "tokenize: the corpus holds no documents",
              stats.null_values > 0 ? concat(" (", stats.null_values, " null texts skipped)") : "",
              "; check --input, --format and --field");
  AMBER_CHECK(report.train_docs + report.val_docs > 0, "tokenize: the mixture weights kept none of the corpus's ",
              stats.documents, " documents; raise the --input weights");

  auto list = [](const std::vector<ShardEntry>& shards) {
    ojson a = ojson::array();
    for (const ShardEntry& s : shards) a.push_back({{"file", s.file}, {"documents", s.docs}, {"tokens", s.tokens}, {"checksum", hex64(s.checksum)}});
    return a;
  };
  const std::string counts_file = "train-token-counts.json";
  write_json_atomically((fs::path(options.out_dir) / counts_file).string(), token_counts_json(train_counts), -1);
  ojson manifest;
  manifest["format"] = "amber-token-shards";
  manifest["version"] = kShardVersion;
  manifest["vocab_size"] = vocab_size;
  manifest["tokenizer"] = {{"fingerprint", settings["tokenizer_fingerprint"]}, {"vocab_size", vocab_size}};
  manifest["settings"] = settings;
  manifest["train"] = list(train_shards);
  manifest["val"] = list(val_shards);
  manifest["train_documents"] = report.train_docs;
  manifest["train_tokens"] = report.train_tokens;
  manifest["val_documents"] = report.val_docs;
  manifest["val_tokens"] = report.val_tokens;
  manifest["train_token_counts"] = counts_file;
  manifest["repaired_utf8_bytes"] = stats.repaired_bytes;
  manifest["null_values_skipped"] = stats.null_values;
  write_json_atomically(manifest_path, manifest);
  return report;
}

namespace {

nlohmann::json read_manifest(const std::string& path) {
  std::ifstream in(path);
  AMBER_CHECK(in.good(), "no ", path, "; the folder was not produced by a finished `amber tokenize` run");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, " is not valid JSON (", e.what(), "); re-run amber tokenize");
  }
}

}  // namespace

std::vector<std::string> list_shards(const std::string& dir, const std::string& split) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  const nlohmann::json j = read_manifest(path);
  AMBER_CHECK(j.contains(split) && j[split].is_array(), path, " has no \"", split,
              "\" list; the split must be train or val");
  std::vector<std::string> files;
  for (const auto& e : j[split]) {
    AMBER_CHECK(e.contains("file") && e["file"].is_string(), path, ": every ", split, " entry needs a \"file\"");
    files.push_back((fs::path(dir) / e["file"].get<std::string>()).string());
  }
  return files;
}

ShardSetCheck check_shards(const std::string& dir, const Tokenizer* tokenizer, const std::string& tokenizer_path) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  const nlohmann::json j = read_manifest(path);
  const std::string redo = "; re-run amber tokenize into a fresh folder";
  ShardSetCheck result;
  if (j.contains("vocab_size")) {
    AMBER_CHECK(j["vocab_size"].is_number_integer(), path, ": \"vocab_size\" must be an integer", redo);
    result.vocab_size = j["vocab_size"].get<int64_t>();
  }
  const bool has_identity = j.contains("tokenizer") && j["tokenizer"].is_object();
  if (has_identity && tokenizer) {
    const nlohmann::json& t = j["tokenizer"];
    AMBER_CHECK(t.contains("fingerprint") && t["fingerprint"].is_string() && t.contains("vocab_size") &&
                    t["vocab_size"].is_number_integer(),
                path, ": \"tokenizer\" needs a string \"fingerprint\" and an integer \"vocab_size\"", redo);
    const std::string made_by = t["fingerprint"].get<std::string>();
    const int64_t made_vocab = t["vocab_size"].get<int64_t>();
    const std::string given = tokenizer_fingerprint(*tokenizer);
    AMBER_CHECK(made_by == given && made_vocab == tokenizer->vocab_size(), dir,
                " was tokenized with another tokenizer: manifest.json records fingerprint ", made_by, " and ",
                made_vocab, " tokens, but ", tokenizer_path, " has fingerprint ", given, " and ",
                tokenizer->vocab_size(), " tokens; point data.tokenizer at the tokenizer that made the shards, or ",
                "tokenize again with this one");
  }
  bool has_checksums = true;
  for (const char* split : {"train", "val"}) {
    const std::vector<std::string> files = list_shards(dir, split);
    for (size_t i = 0; i < files.size(); ++i) {
      const nlohmann::json& e = j[split][i];
      const Shard shard = Shard::open(files[i], false);  // the loader verifies the contents against the header
      AMBER_CHECK(result.vocab_size == 0 || shard.vocab_size() == result.vocab_size, "shard ", files[i],
                  " was written for ", shard.vocab_size(), " tokens but ", path, " says ", result.vocab_size, redo);
      if (e.contains("documents") && e.contains("tokens")) {
        AMBER_CHECK(e["documents"].is_number_integer() && e["tokens"].is_number_integer(), path, ": the ", split,
                    " entry of ", e["file"].get<std::string>(), " needs integer \"documents\" and \"tokens\"", redo);
        const int64_t docs = e["documents"].get<int64_t>();
        const int64_t tokens = e["tokens"].get<int64_t>();
        AMBER_CHECK(shard.num_docs() == docs && shard.num_tokens() == tokens, "shard ", files[i], " holds ",
                    shard.num_docs(), " documents and ", shard.num_tokens(), " tokens but ", path, " lists ", docs,
                    " and ", tokens, " for it; the file was replaced or swapped with another", redo);
      }
      if (!e.contains("checksum")) {
        has_checksums = false;
        continue;
      }
      AMBER_CHECK(e["checksum"].is_string(), path, ": the checksum of ", e["file"].get<std::string>(),
                  " must be a hex string", redo);
      const std::string want = e["checksum"].get<std::string>();
      AMBER_CHECK(hex64(shard.checksum()) == want, "shard ", files[i], " has checksum ", hex64(shard.checksum()),
                  " but ", path, " lists ", want, " for it; the file was replaced, altered or swapped with another",
                  redo);
    }
  }
  if (!has_identity || !has_checksums) {
    result.notice = concat(path, " was written by an older amber tokenize and records no tokenizer fingerprint or ",
                           "shard checksums, so the shards' identity cannot be checked; tokenizing again records them");
  }
  return result;
}

}  // namespace amber::data
