// Inputs the fuzz targets (fuzz/) found, kept as tests of the reader they broke; each
// input is also in the target's seed corpus.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "amber/core/error.h"
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
  } catch (const amber::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": not valid JSON"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an amber::Error: " << e.what();
  }
  std::filesystem::remove(path);
}

TEST(TokenizerJsonFuzzRegression, AnIdFarPastTheFilesTokensIsRefusedBeforeAllocating) {
  // fuzz/corpus/tokenizer_json/regression-huge-vocab-id.json: a vocabulary id of
  // 52,222,225 sized the dense id tables; ids near 2^30 ask for gigabytes. An id inside
  // the supported range but far past the file's tokens is refused the same way.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("amber_tok_huge_id_" + std::to_string(::getpid()) + ".json")).string();
  for (const char* id : {"52222225", "10000000"}) {
    std::ofstream(path, std::ios::trunc) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": )" << id
                                         << R"(}, "merges": []}})";
    try {
      load_tokenizer_json(path);
      ADD_FAILURE() << "loaded vocabulary id " << id;
    } catch (const amber::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(".vocab[\"b\"] ")), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(id), std::string::npos) << e.what();
    }
  }
  for (const char* id : {"2000000000", "-3", "4294967296", "1000000"}) {
    std::ofstream(path, std::ios::trunc) << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},)"
                                         << R"( "added_tokens": [{"id": )" << id << R"(, "content": "<|x|>"}]})";
    try {
      load_tokenizer_json(path);
      ADD_FAILURE() << "loaded id " << id;
    } catch (const amber::Error& e) {
      EXPECT_NE(std::string(e.what()).find("added_tokens[0].id "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(id), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace amber::data
