// Every format is read line by line, so multi-gigabyte JSONL files stream in constant memory.
#include "amber/data/corpus.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
#include "amber/data/parquet_reader.h"
#include "amber/data/text_stream.h"
#include "amber/data/utf8.h"

namespace amber::data {
namespace fs = std::filesystem;

namespace {

constexpr std::pair<CorpusFormat, std::string_view> kFormatNames[] = {
    {CorpusFormat::automatic, "auto"},   {CorpusFormat::lines, "lines"},     {CorpusFormat::paragraphs, "paragraphs"},
    {CorpusFormat::jsonl, "jsonl"},      {CorpusFormat::fortune, "fortune"},
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The name says JSONL (a compression suffix aside; the bytes say whether it is compressed).
bool named_jsonl(std::string_view path) {
  for (std::string_view compressed : {".gz", ".zst", ".zstd"}) {
    if (ends_with(path, compressed)) path.remove_suffix(compressed.size());
  }
  return ends_with(path, ".jsonl") || ends_with(path, ".json");
}

CorpusFormat detect_format(const std::string& path) {
  if (named_jsonl(path)) return CorpusFormat::jsonl;
  TextStream in(path);
  std::string line;
  for (int i = 0; i < 10000 && in.getline(line); ++i) {
    if (line == "%") return CorpusFormat::fortune;
  }
  return CorpusFormat::lines;
}

// A JSONL row's messages, checked: a list of objects with string role and content.
std::vector<ChatMessage> chat_messages(const nlohmann::json& row, const std::string& field, const std::string& where) {
  AMBER_CHECK(row.is_object() && row.contains(field), where, ": no field \"", field, "\" (the chat messages); name ",
              "the messages field with --field");
  const nlohmann::json& list = row[field];
  AMBER_CHECK(list.is_array(), where, ": field \"", field, "\" is not a list of messages; a chat row holds ",
              "[{\"role\": ..., \"content\": ...}, ...]");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    for (const char* key : {"role", "content"}) {
      AMBER_CHECK(m.is_object() && m.contains(key) && m[key].is_string(), where, ": message ", i, " of \"", field,
                  "\" has no string \"", key, "\"; every message needs a string role and content");
    }
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

void strip_trailing(std::string& s, std::string_view chars) {
  while (!s.empty() && chars.find(s.back()) != std::string_view::npos) s.pop_back();
}

}  // namespace

CorpusFormat corpus_format_from_name(std::string_view name) {
  for (const auto& [format, n] : kFormatNames) {
    if (n == name) return format;
  }
  fail("unknown corpus format \"", name, "\"; use auto, lines, paragraphs, jsonl or fortune");
}

std::string_view corpus_format_name(CorpusFormat format) {
  for (const auto& [f, n] : kFormatNames) {
    if (f == format) return n;
  }
  return "?";
}

std::vector<std::string> corpus_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    AMBER_CHECK(!ec && fs::exists(st), "corpus input ", input, " does not exist; pass files or folders of text");
    if (!fs::is_directory(st)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    fs::directory_iterator it(input, ec);
    AMBER_CHECK(!ec, "cannot list corpus folder ", input, ": ", ec.message());
    for (const auto& entry : it) {
      if (entry.is_symlink() || !entry.is_regular_file()) continue;
      if (ends_with(entry.path().string(), ".dat")) continue;
      found.push_back(entry.path().string());
    }
    std::sort(found.begin(), found.end());
    AMBER_CHECK(!found.empty(), "corpus folder ", input, " holds no regular files");
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

CorpusStats read_corpus(const std::vector<std::string>& files, const CorpusOptions& options,
                        const std::function<void(std::string&&)>& on_document) {
  CorpusStats stats;
  int64_t file_bytes = 0, file_repaired = 0;  // document bytes as read, and how many were invalid
  auto emit = [&](std::string& doc) {
    if (doc.empty()) return;
    file_bytes += static_cast<int64_t>(doc.size());
    file_repaired += static_cast<int64_t>(utf8_repair(doc));
    stats.documents += 1;
    stats.bytes += static_cast<int64_t>(doc.size());
    on_document(std::move(doc));
    doc.clear();
  };
  auto check_repairs = [&](const std::string& path) {
    stats.repaired_bytes += file_repaired;
    const double invalid = file_bytes > 0 ? static_cast<double>(file_repaired) / static_cast<double>(file_bytes) : 0;
    AMBER_CHECK(invalid <= options.max_invalid_utf8, "corpus file ", path, ": ", file_repaired, " of its ", file_bytes,
                " document bytes (a fraction of ", invalid, ") are not valid UTF-8, more than --max-invalid-utf8 ",
                options.max_invalid_utf8, " allows; it is in another encoding (convert it, e.g. iconv -f LATIN1 -t ",
                "UTF-8) or not text. Raise --max-invalid-utf8 to replace them with U+FFFD instead");
  };
  const bool chat = options.chat_template != ChatTemplate::none;
  for (const std::string& path : files) {
    stats.files += 1;
    std::string doc;
    file_bytes = file_repaired = 0;
    if (is_parquet_file(path)) {
      AMBER_CHECK(!chat, "corpus file ", path, " is Parquet, whose chat messages (a list column) amber does not read; ",
                  "convert it to JSONL, e.g. python3 -c \"import pandas; pandas.read_parquet('", path, "').to_json('",
                  path, ".jsonl', orient='records', lines=True, force_ascii=False)\", and pass that file");
      const ParquetColumnStats s = read_parquet_column(path, options.field, [&](std::string_view text) {
        doc.assign(text);
        emit(doc);
      });
      stats.null_values += s.nulls;
      check_repairs(path);
      continue;
    }
    TextStream in(path);
    const CorpusFormat format = options.format == CorpusFormat::automatic ? detect_format(path) : options.format;
    AMBER_CHECK(!chat || format == CorpusFormat::jsonl, "corpus file ", path, " is read as ",
                corpus_format_name(format), ", but --chat-template renders the messages of JSONL rows; name the ",
                "file .jsonl or pass --format jsonl");
    std::string line;
    int64_t line_no = 0;
    while (in.getline(line)) {
      ++line_no;
      switch (format) {
        case CorpusFormat::lines:
          strip_trailing(line, "\r");
          doc = std::move(line);
          emit(doc);
          break;
        case CorpusFormat::paragraphs:
        case CorpusFormat::fortune: {
          strip_trailing(line, "\r");
          const bool separator = format == CorpusFormat::fortune
                                     ? line == "%"
                                     : line.find_first_not_of(" \t") == std::string::npos;
          if (separator) {
            strip_trailing(doc, "\n");
            emit(doc);
          } else {
            doc += line;
            doc += '\n';
          }
          break;
        }
        case CorpusFormat::jsonl: {
          if (line.find_first_not_of(" \t\r") == std::string::npos) break;
          nlohmann::json j;
          try {
            j = nlohmann::json::parse(line);
          } catch (const nlohmann::json::exception& e) {  // out_of_range too: a number past a double
            fail(path, ":", line_no, ": not valid JSON (", e.what(), ")");
          }
          if (chat) {
            doc = render_chat(options.chat_template, chat_messages(j, options.field, concat(path, ":", line_no)));
            emit(doc);
            break;
          }
          const bool has_messages = j.is_object() && j.contains("messages") && j["messages"].is_array();
          AMBER_CHECK(j.is_object() && j.contains(options.field), path, ":", line_no, ": no field \"", options.field,
                      "\"; choose the text field with --field",
                      has_messages ? " (a chat row: render its messages with --chat-template chatml or llama3)" : "");
          AMBER_CHECK(j[options.field].is_string(), path, ":", line_no, ": field \"", options.field,
                      "\" is not a string",
                      has_messages ? " (a chat row: render its messages with --chat-template chatml or llama3)" : "");
          doc = j[options.field].get<std::string>();
          emit(doc);
          break;
        }
        case CorpusFormat::automatic:
          break;
      }
    }
    strip_trailing(doc, "\n");
    emit(doc);
    check_repairs(path);
  }
  return stats;
}

}  // namespace amber::data
