// Pre-tokenization: splits text into the pieces BPE merges within, as Hugging Face's
// ByteLevel, Split(regex, Isolated) and Metaspace pre-tokenizers do, using PCRE2 with
// Unicode classes.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace amber::data {

class Regex;  // a compiled PCRE2 pattern (pretokenizer.cpp)

// GPT-2's pattern, built into Hugging Face's ByteLevel pre-tokenizer.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's pattern, used as Split(regex, Isolated) before ByteLevel(use_regex=false).
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  struct Step {
    enum class Kind { split, byte_level, metaspace } kind = Kind::split;
    std::string pattern;  // split: the regex or literal string; metaspace: the replacement of ' '
    std::string prepend_scheme;  // metaspace: "always", "first" (the text's first piece only) or "never"
    bool split_words = true;     // metaspace: a piece before each replacement
    bool literal = false;  // split: pattern came from {"String": ...}
    bool add_prefix_space = false;  // byte_level
    bool use_regex = true;          // byte_level: split with kGpt2Pattern first
    bool trim_offsets = true;       // byte_level: kept for the JSON round trip only
    std::shared_ptr<const Regex> regex;
  };

  PreTokenizer() = default;  // no splitting: the whole text is one piece
  static PreTokenizer gpt2(bool add_prefix_space = false);
  static PreTokenizer llama3();
  // `where` names the file and key for errors.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::ordered_json to_json() const;

  // True when the pieces are to be read as bytes in GPT-2's byte-level alphabet.
  bool byte_level() const;
  // Appends the pieces of `text` (valid UTF-8) to `pieces`. A view points into `text`
  // or into `scratch` (for pieces given a prefix space), which must outlive it.
  // `at_text_start`: `text` begins the whole text (no added token before it).
  void split(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& scratch,
             bool at_text_start = true) const;

 private:
  std::vector<Step> steps_;
  bool sequence_ = false;  // written back as {"type": "Sequence"} even with one step
};

}  // namespace amber::data
