// Fuzz target: the tokenizer.json loader, from the file, then one encode and decode
// with whatever tokenizer it accepted.
#include "amber/data/tokenizer_json.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = amber::fuzz::input_file(data, size, "tokenizer.json");
  try {
    const amber::data::Tokenizer tokenizer = amber::data::load_tokenizer_json(path);
    tokenizer.decode(tokenizer.encode("Hello, world! 12 ünïcödé <|bos|>\n\n  x"));
  } catch (const amber::Error&) {
  }
  return 0;
}
