// Fuzz target: encode and decode with a fixed byte-level BPE tokenizer (the seed in
// fuzz/corpus/tokenizer_json/). The input is text to encode (decode(encode(x)) must
// give x back for valid UTF-8) and, read as 32-bit ids, a sequence to decode.
#include <cstring>
#include <vector>

#include "amber/data/tokenizer_json.h"
#include "amber/data/utf8.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const amber::data::Tokenizer tokenizer =
      amber::data::load_tokenizer_json(AMBER_SOURCE_DIR "/fuzz/corpus/tokenizer_json/bpe300.json");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    if (amber::data::utf8_first_invalid(text) == text.size() && tokenizer.decode(ids) != text) __builtin_trap();
  } catch (const amber::Error&) {
  }
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  try {
    tokenizer.decode(ids);
  } catch (const amber::Error&) {
  }
  return 0;
}
