// Fuzz target: the safetensors reader (header bounds, JSON types, dtypes, shapes
// against byte ranges, overlaps).
#include "amber/io/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = amber::fuzz::input_file(data, size, "fuzz.safetensors");
  try {
    amber::load_safetensors(path);
  } catch (const amber::Error&) {
  }
  return 0;
}
