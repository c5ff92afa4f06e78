// Normalization before pre-tokenization, as Hugging Face's normalizers: the Unicode
// forms NFC, NFD, NFKC and NFKD (Qwen-family files use NFC; utf8proc does the work),
// and Prepend and Replace of a literal string, with which SentencePiece-style files
// (Llama-2, Mistral, Gemma) spell spaces; alone or in a Sequence. Each text segment
// between added tokens is normalized on its own, as Hugging Face does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace amber::data {

class Normalizer {
 public:
  Normalizer() = default;  // leaves text as it is
  // `where` names the file and key for errors; null and an empty Sequence mean none.
  static Normalizer from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::ordered_json to_json() const;

  bool empty() const { return steps_.empty(); }
  // The normalized segment: `segment` itself without steps, else a view of `storage`.
  std::string_view apply(std::string_view segment, std::string& storage) const;

 private:
  struct Step {
    enum class Kind { unicode, prepend, replace } kind = Kind::replace;
    std::string pattern;  // unicode: the form's name (NFC, ...); replace: the literal replaced
    std::string content;  // prepend and replace: the text put in
  };
  std::vector<Step> steps_;
  bool sequence_ = false;  // written back as a Sequence even with one step
};

}  // namespace amber::data
