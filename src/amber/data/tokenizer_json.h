// Hugging Face tokenizer.json: load (BPE model, ByteLevel / Split+ByteLevel
// pre-tokenizers, ignore_merges, added tokens, byte fallback) and save.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "amber/data/tokenizer.h"

namespace amber::data {

// Errors name `path` and the JSON key at fault.
Tokenizer load_tokenizer_json(const std::string& path);
Tokenizer tokenizer_from_json(const nlohmann::json& j, const std::string& where);

nlohmann::ordered_json tokenizer_to_json(const Tokenizer& tokenizer);
// Writes to a temporary file and renames it, so a crash never leaves half a file.
void save_tokenizer_json(const Tokenizer& tokenizer, const std::string& path);

}  // namespace amber::data
