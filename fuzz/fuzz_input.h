// What the fuzz targets share. A reader must turn every bad input into an amber::Error;
// any other exception escapes the target and libFuzzer reports it as a crash, as it
// does a sanitizer report. Readers that take a path get the input as a file.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "amber/core/error.h"

namespace amber::fuzz {

// A folder of this process's own, removed at exit: in /dev/shm where there is one, as
// rewriting a file on ext4 waits for the disk (its replace-by-truncate heuristic) and
// holds a target to a few hundred executions a second.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path =
        (std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                   : std::filesystem::temp_directory_path()) /
        ("amber_fuzz_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes the input to scratch_dir()/name and returns its path.
inline std::string input_file(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = (scratch_dir() / name).string();
  ::unlink(path.c_str());  // a new file, not a truncated one (see scratch_dir)
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace amber::fuzz
