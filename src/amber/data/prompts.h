// A run's text as token ids, the same for the trainer's sample previews and for
// `amber sample`: its special tokens (data.bos, data.eos) and the prompts to continue.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amber/data/tokenizer.h"

namespace amber::data {

// The id of a run's special token `token` (the value of data.<key>, e.g. key "bos") in
// `tokenizer`, read from `tokenizer_path`; nullopt when the run names none. A named
// token needs a tokenizer that holds it.
std::optional<int32_t> special_token_id(const Tokenizer* tokenizer, const std::string& tokenizer_path,
                                        const std::string& token, const char* key);

// A prompt's ids: bos when the run has one, then the text's tokens. `what` names where
// the prompt came from in the error for one that encodes to no tokens.
std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, std::optional<int32_t> bos, const std::string& text,
                                const std::string& what);

}  // namespace amber::data
