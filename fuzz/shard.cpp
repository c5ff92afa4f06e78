// Fuzz target: the token shard reader. The checksum is verified when the input's first
// byte is odd; otherwise every header and offset check still runs and every document
// is read, so damage the checksum would catch must not crash the reader either.
#include "amber/data/shard.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = amber::fuzz::input_file(data, size, "fuzz.bin");
  try {
    const amber::data::Shard shard = amber::data::Shard::open(path, size > 0 && (data[0] & 1));
    for (int64_t d = 0; d < shard.num_docs(); ++d) shard.document(d);
  } catch (const amber::Error&) {
  }
  return 0;
}
