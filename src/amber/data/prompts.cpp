#include "amber/data/prompts.h"

#include "amber/core/error.h"

namespace amber::data {

std::optional<int32_t> special_token_id(const Tokenizer* tokenizer, const std::string& tokenizer_path,
                                        const std::string& token, const char* key) {
  if (token.empty()) return std::nullopt;
  AMBER_CHECK(tokenizer, "data.", key, " = '", token, "' needs data.tokenizer to look up its id");
  const std::optional<int32_t> id = tokenizer->token_to_id(token);
  AMBER_CHECK(id, "data.", key, " = '", token, "' is not a token of the tokenizer (", tokenizer_path,
              " has no token '", token, "'); use one of its special tokens, or the tokenizer the run was trained with");
  return id;
}

std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, std::optional<int32_t> bos, const std::string& text,
                                const std::string& what) {
  std::vector<int32_t> ids;
  if (bos) ids.push_back(*bos);
  tokenizer.encode(text, ids);
  AMBER_CHECK(!ids.empty(), what, ": '", text, "' encodes to no tokens and the run has no data.bos to start from; ",
              "give some text");
  return ids;
}

}  // namespace amber::data
