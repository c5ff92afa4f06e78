// Helpers shared by the data tests: temporary folders, file writing, and a small
// fortunes subset so tests stay fast on two cores.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "amber/core/error.h"

namespace amber::data::testing {

// A fresh folder under the system temp dir, removed when the test ends.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("amber_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Expects `fn` to throw amber::Error whose message contains every fragment.
template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an amber::Error";
  } catch (const Error& e) {
    for (const std::string& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message \"" << e.what() << "\" lacks \"" << f
                                                                  << "\"";
    }
  }
}

inline const std::vector<std::string>& fortune_subset() {
  static const std::vector<std::string> files = {"/usr/share/games/fortunes/computers",
                                                 "/usr/share/games/fortunes/science",
                                                 "/usr/share/games/fortunes/wisdom"};
  return files;
}

}  // namespace amber::data::testing
