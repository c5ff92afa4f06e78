// Fuzz target: the TOML config binder (text -> RunConfig, validated) and a `--set`
// override taken from the input's first line.
#include <string>

#include "amber/core/toml_fields.h"
#include "amber/train/run_config.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    amber::run_config_from_toml(text, "fuzz.toml");
  } catch (const amber::Error&) {
  }
  try {
    toml::table root;
    amber::apply_override(root, text.substr(0, text.find('\n')));
  } catch (const amber::Error&) {
  }
  return 0;
}
