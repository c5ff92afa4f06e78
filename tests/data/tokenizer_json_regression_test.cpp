// Inputs the fuzz targets (fuzz/) found, kept as tests of the reader they broke; each
// input is also in the target's seed corpus.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "amber/data/tokenizer_json.h"

namespace amber::data {
namespace {

TEST(TokenizerJsonFuzzRegression, ANumberTooLargeForADoubleIsAnErrorNamingTheFile) {
  // fuzz/corpus/tokenizer_json/regression-number-overflow.json: nlohmann's out_of_range
  // (406), which escaped as an exception the CLI did not report.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("amber_tok_overflow_" + std::to_string(::getpid()) + ".json"))
          .string();
  std::ofstream(path) << R"({"model": {"vocab": {"a": 2.33200218E6923535832}}})";
  try {
    load_tokenizer_json(path);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": not valid JSON"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an amber::Error: " << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace amber::data
