// Normalization before pre-tokenization: the Hugging Face normalizers SentencePiece-
// style files (Llama-2, Mistral, Gemma) spell spaces with, Prepend and Replace of a
// literal string, alone or in a Sequence. Each text segment between added tokens is
// normalized on its own, as Hugging Face does.
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
    bool prepend = false;  // Prepend(content) to a non-empty text; else Replace(pattern -> content)
    std::string pattern, content;
  };
  std::vector<Step> steps_;
  bool sequence_ = false;  // written back as a Sequence even with one step
};

}  // namespace amber::data
