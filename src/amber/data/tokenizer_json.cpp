// The subset of tokenizer.json amber reads is the one byte-level BPE files use; every
// other component is rejected with the key that names it rather than silently ignored.
#include "amber/data/tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "amber/core/error.h"

namespace amber::data {
namespace {

using nlohmann::json;

// Ids index dense tables (one entry per id), so a stray huge id would be a huge
// allocation; 2^24 is also the largest vocabulary `amber tokenizer train` makes.
constexpr int64_t kMaxTokenIds = int64_t{1} << 24;

// The id at `key` of `j` as a checked int32: JSON may hold any integer (Hugging Face
// reads ids as u32), and a silent narrowing would point at another token.
int32_t token_id(const json& j, const std::string& where) {
  AMBER_CHECK(j.is_number_integer(), where, " must be an integer token id, got ", j.dump());
  const bool in_range = j.is_number_unsigned() ? j.get<uint64_t>() < static_cast<uint64_t>(kMaxTokenIds)
                                               : j.get<int64_t>() >= 0 && j.get<int64_t>() < kMaxTokenIds;
  AMBER_CHECK(in_range, where, " is ", j.dump(), ", outside the ids amber supports [0, ", kMaxTokenIds, ")");
  return static_cast<int32_t>(j.get<int64_t>());
}

std::string optional_string(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return {};
  AMBER_CHECK(j[key].is_string(), where, ".", key, " must be a string or null");
  return j[key].get<std::string>();
}

bool optional_bool(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return false;
  AMBER_CHECK(j[key].is_boolean(), where, ".", key, " must be true or false");
  return j[key].get<bool>();
}

// The decoder only has to agree with how amber decodes: byte-level characters back
// to bytes, <0xXX> tokens to their byte, everything else verbatim but for a
// SentencePiece-style spelling of spaces, which `spaces` gathers from Replace, Strip and
// Metaspace decoders.
void read_decoder(const json& j, const std::string& where, SpaceDecoding& spaces) {
  if (j.is_null()) return;
  AMBER_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where, " must be an object with a \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    AMBER_CHECK(j.contains("decoders") && j["decoders"].is_array(), where, ".decoders must be an array");
    for (size_t i = 0; i < j["decoders"].size(); ++i)
      read_decoder(j["decoders"][i], concat(where, ".decoders[", i, "]"), spaces);
    return;
  }
  if (type == "Replace") {
    const json& pattern = j.value("pattern", json());
    AMBER_CHECK(pattern.is_object() && pattern.contains("String") && pattern["String"].is_string() &&
                    !pattern["String"].get<std::string>().empty() && j.value("content", json()) == " ",
                where, ": amber decodes a Replace of a literal string by a space only (the spelling of spaces)");
    spaces.replacement = pattern["String"].get<std::string>();
    return;
  }
  if (type == "Strip") {
    AMBER_CHECK(j.value("content", json()) == " " && j.value("stop", json()) == 0 && j.contains("start") &&
                    j["start"].is_number_unsigned(),
                where, ": amber decodes a Strip of leading spaces only (content \" \", start n, stop 0)");
    spaces.strip_leading = j["start"].get<int>();
    return;
  }
  if (type == "Metaspace") {
    const std::string replacement = optional_string(j, "replacement", where);
    spaces.replacement = replacement.empty() ? "\xe2\x96\x81" : replacement;  // U+2581 "▁"
    const std::string scheme = optional_string(j, "prepend_scheme", where);
    AMBER_CHECK(scheme.empty() || scheme == "always" || scheme == "first" || scheme == "never", where,
                ".prepend_scheme is \"", scheme, "\"; it must be \"always\", \"first\" or \"never\"");
    const bool prepends = scheme.empty() ? !j.contains("add_prefix_space") || optional_bool(j, "add_prefix_space", where)
                                         : scheme != "never";
    spaces.first_token_drops = prepends;
    return;
  }
  AMBER_CHECK(type == "ByteLevel" || type == "ByteFallback" || type == "Fuse", where, ".type is \"", type,
              "\"; amber decodes ByteLevel, ByteFallback, Fuse, Replace (of the space spelling), Strip and Metaspace "
              "decoders only");
}

}  // namespace

Tokenizer tokenizer_from_json(const json& j, const std::string& where) {
  AMBER_CHECK(j.is_object(), where, ": the top level must be a JSON object");
  AMBER_CHECK(j.contains("model") && j["model"].is_object(), where, ": missing the \"model\" object");
  const json& m = j["model"];
  const std::string mw = where + ": model";
  const std::string type = m.value("type", std::string("BPE"));
  AMBER_CHECK(type == "BPE", mw, ".type is \"", type, "\"; amber supports BPE models only");
  AMBER_CHECK(!m.contains("dropout") || m["dropout"].is_null() || m["dropout"] == 0.0, mw,
              ".dropout is set; BPE dropout is a training-time augmentation amber does not apply, set it to null");
  AMBER_CHECK(optional_string(m, "continuing_subword_prefix", mw).empty(), mw,
              ".continuing_subword_prefix is set; amber supports byte-level BPE without subword prefixes");
  AMBER_CHECK(optional_string(m, "end_of_word_suffix", mw).empty(), mw,
              ".end_of_word_suffix is set; amber supports byte-level BPE without word suffixes");

  PreTokenizer pre = PreTokenizer::from_json(j.value("pre_tokenizer", json()), where + ": pre_tokenizer");
  Normalizer normalizer = Normalizer::from_json(j.value("normalizer", json()), where + ": normalizer");
  SpaceDecoding spaces;
  read_decoder(j.value("decoder", json()), where + ": decoder", spaces);

  BpeOptions options;
  options.byte_level = pre.byte_level();
  options.ignore_merges = optional_bool(m, "ignore_merges", mw);
  options.byte_fallback = optional_bool(m, "byte_fallback", mw);
  options.fuse_unk = optional_bool(m, "fuse_unk", mw);
  options.unk_token = optional_string(m, "unk_token", mw);

  AMBER_CHECK(m.contains("vocab") && m["vocab"].is_object(), mw, ".vocab must be an object of token -> id");
  // Ids index dense tables, so an id far past the number of tokens the file defines is
  // damage, not a tokenizer: a gap of more than kMaxIdGap unused ids is refused.
  constexpr int64_t kMaxIdGap = 65536;
  const size_t added_count = j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0;
  const int64_t id_limit = static_cast<int64_t>(m["vocab"].size() + added_count) + kMaxIdGap;
  std::vector<std::string> vocab;
  for (const auto& [token, id] : m["vocab"].items()) {
    const auto i = static_cast<size_t>(token_id(id, concat(mw, ".vocab[\"", token, "\"]")));
    AMBER_CHECK(static_cast<int64_t>(i) < id_limit, mw, ".vocab[\"", token, "\"] = ", i, " must be below ", id_limit,
                " (the file's token count plus ", kMaxIdGap, ")");
    if (vocab.size() <= i) vocab.resize(i + 1);
    AMBER_CHECK(vocab[i].empty(), mw, ".vocab: id ", i, " is given to both \"", vocab[i], "\" and \"", token, "\"");
    AMBER_CHECK(!token.empty(), mw, ".vocab: the empty string is not a valid token");
    vocab[i] = token;
  }

  std::vector<std::pair<std::string, std::string>> merges;
  // Hugging Face refuses a BPE model without the key ("Missing vocab/merges"); an empty list is fine.
  AMBER_CHECK(m.contains("merges"), mw, ".merges is missing; a BPE model needs its merges (write \"merges\": [] ",
              "for a vocabulary without any)");
  AMBER_CHECK(m["merges"].is_array(), mw, ".merges must be an array");
  for (size_t i = 0; i < m["merges"].size(); ++i) {
    const json& e = m["merges"][i];
    // Two spellings exist: "a b" (tokenizers < 0.20) and ["a", "b"].
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t space = s.find(' ');
      AMBER_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                      s.find(' ', space + 1) == std::string::npos,
                  mw, ".merges[", i, "] \"", s, "\" must be two tokens separated by one space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      AMBER_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), mw, ".merges[", i,
                  "] must be \"a b\" or [\"a\", \"b\"]");
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
  BpeModel model(std::move(vocab), std::move(merges), std::move(options), mw);

  std::vector<AddedToken> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    AMBER_CHECK(j["added_tokens"].is_array(), where, ": added_tokens must be an array");
    std::unordered_map<int32_t, size_t> added_by_id;
    std::unordered_map<std::string, size_t> added_by_text;
    for (size_t i = 0; i < j["added_tokens"].size(); ++i) {
      const json& t = j["added_tokens"][i];
      const std::string aw = concat(where, ": added_tokens[", i, "]");
      AMBER_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                      t["content"].is_string(),
                  aw, " needs an integer \"id\" and a string \"content\"");
      const int32_t id = token_id(t["id"], aw + ".id");
      const std::string content = t["content"].get<std::string>();
      // Hugging Face loads such files but renumbers the token (or drops the clash)
      // silently, so its ids and the file's would disagree: refuse instead.
      const std::string fix =
          "; give every added token its own id and text (the text model.vocab has at that id, or an id past it)";
      const std::string at_id = id < model.vocab_size() ? model.id_to_token(id) : std::string();
      AMBER_CHECK(at_id.empty() || at_id == content, aw, " gives id ", id, " to \"", content,
                  "\" but model.vocab gives it to \"", at_id, "\"", fix);
      const int32_t vocab_id = model.token_to_id(content);
      AMBER_CHECK(vocab_id < 0 || vocab_id == id, aw, " gives \"", content, "\" id ", id,
                  " but model.vocab has it as id ", vocab_id, fix);
      const auto [by_id, new_id] = added_by_id.emplace(id, i);
      AMBER_CHECK(new_id, aw, " reuses id ", id, " of added_tokens[", by_id->second, "]", fix);
      const auto [by_text, new_text] = added_by_text.emplace(content, i);
      AMBER_CHECK(new_text, aw, " repeats the text \"", content, "\" of added_tokens[", by_text->second, "]", fix);
      AMBER_CHECK(!optional_bool(t, "single_word", aw), aw,
                  ".single_word is true; amber supports added tokens with single_word set to false");
      AMBER_CHECK(t["id"].get<int64_t>() >= 0 && t["id"].get<int64_t>() < id_limit, aw, ".id ", t["id"].dump(),
                  " must be a non-negative id below ", id_limit, " (the file's token count plus ", kMaxIdGap, ")");
      AddedToken a;
      a.id = id;
      a.content = content;
      a.special = optional_bool(t, "special", aw);
      a.normalized = optional_bool(t, "normalized", aw);
      a.lstrip = optional_bool(t, "lstrip", aw);
      a.rstrip = optional_bool(t, "rstrip", aw);
      added.push_back(std::move(a));
    }
  }
  return Tokenizer(std::move(model), std::move(pre), std::move(added), std::move(normalizer), std::move(spaces));
}

Tokenizer load_tokenizer_json(const std::string& path) {
  AMBER_CHECK(!std::filesystem::is_directory(path), "tokenizer file ", path,
              " is a directory; give the path of a Hugging Face tokenizer.json");
  std::ifstream in(path, std::ios::binary);
  AMBER_CHECK(in.good(), "cannot open tokenizer file ", path, "; check the path (a Hugging Face tokenizer.json)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), "); expected a Hugging Face tokenizer.json");
  }
  return tokenizer_from_json(j, path);
}

nlohmann::ordered_json tokenizer_to_json(const Tokenizer& tokenizer) {
  using ojson = nlohmann::ordered_json;
  const BpeModel& m = tokenizer.model();
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ojson added = ojson::array();
  for (const AddedToken& t : tokenizer.added_tokens()) {
    added.push_back({{"id", t.id}, {"content", t.content}, {"single_word", false}, {"lstrip", t.lstrip},
                     {"rstrip", t.rstrip}, {"normalized", t.normalized}, {"special", t.special}});
  }
  j["added_tokens"] = added;
  j["normalizer"] = tokenizer.normalizer().to_json();
  j["pre_tokenizer"] = tokenizer.pre_tokenizer().to_json();
  j["post_processor"] = nullptr;
  if (m.options().byte_level) {
    j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  } else if (m.options().byte_fallback || !tokenizer.space_decoding().replacement.empty()) {
    const SpaceDecoding& spaces = tokenizer.space_decoding();
    ojson decoders = ojson::array();
    if (!spaces.replacement.empty() && !spaces.first_token_drops)
      decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", spaces.replacement}}}, {"content", " "}});
    if (m.options().byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
    if (spaces.first_token_drops)
      decoders.push_back({{"type", "Metaspace"}, {"replacement", spaces.replacement}, {"prepend_scheme", "always"},
                          {"split", true}});
    else
      decoders.push_back({{"type", "Fuse"}});
    if (spaces.strip_leading > 0)
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", spaces.strip_leading}, {"stop", 0}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  } else {
    j["decoder"] = nullptr;
  }
  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = m.options().unk_token.empty() ? ojson(nullptr) : ojson(m.options().unk_token);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = m.options().fuse_unk;
  model["byte_fallback"] = m.options().byte_fallback;
  model["ignore_merges"] = m.options().ignore_merges;
  ojson vocab = ojson::object();
  for (int32_t id = 0; id < m.vocab_size(); ++id) {
    if (!m.id_to_token(id).empty()) vocab[m.id_to_token(id)] = id;
  }
  model["vocab"] = vocab;
  ojson merges = ojson::array();
  for (const auto& [a, b] : m.merges()) merges.push_back({a, b});
  model["merges"] = merges;
  j["model"] = model;
  return j;
}

void save_tokenizer_json(const Tokenizer& tokenizer, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    AMBER_CHECK(out.good(), "cannot write ", tmp, "; check that the folder exists and is writable");
    out << tokenizer_to_json(tokenizer).dump(1) << "\n";
    out.flush();
    AMBER_CHECK(out.good(), "writing ", tmp, " failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  AMBER_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace amber::data
