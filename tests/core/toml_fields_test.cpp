#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "amber/core/toml_fields.h"

namespace amber {
namespace {

std::string set_error(const std::string& assignment) {
  toml::table root;
  try {
    apply_override(root, assignment);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an amber::Error: ") + e.what();
  }
  return "";
}

TEST(TomlFields, SetValuesWithQuotesOrLineBreaksAreErrorsNamingTheKey) {
  for (const std::string& bad : {"model.name=\"abc", "model.name='abc", "model.dims=[1, 2", "model.depth=4\nx = 1",
                                 "model.name=\"a\nb\"", "model.name=a\rb"}) {
    const std::string error = set_error(bad);
    EXPECT_EQ(error.find("--set model."), 0u) << bad << " -> " << error;
  }
}

TEST(TomlFields, SetValuesThatAreNotTomlAreTakenAsBareStrings) {
  toml::table root;
  apply_override(root, "data.bos=<|\"bos\"|>");
  apply_override(root, "data.eos=a = b");
  apply_override(root, "model.depth=4");
  apply_override(root, "train.name=\"quoted \\\" text\"");
  EXPECT_EQ(*root["data"]["bos"].value<std::string>(), "<|\"bos\"|>");
  EXPECT_EQ(*root["data"]["eos"].value<std::string>(), "a = b");
  EXPECT_EQ(*root["model"]["depth"].value<int64_t>(), 4);
  EXPECT_EQ(*root["train"]["name"].value<std::string>(), "quoted \" text");
}

TEST(TomlFields, ADirectoryGivenAsTheConfigFileIsAnErrorNamingIt) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("amber_toml_dir_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  try {
    read_config_file(dir, {});
    ADD_FAILURE() << "a directory loaded as a config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + " is a directory"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an amber::Error: " << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace amber
