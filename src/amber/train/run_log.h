// The run's console, copied into <out_dir>/train.log: every line the console gets (the
// run header, progress lines, evaluations, samples, checkpoints, notes) with the UTC
// time it was written, so that a run's story can be read after the terminal is gone.
#pragma once

#include <chrono>
#include <fstream>
#include <ostream>
#include <streambuf>
#include <string>

namespace amber {

// 2026-12-05T18:34:21.123Z: ISO 8601, UTC, milliseconds.
std::string utc_timestamp(std::chrono::system_clock::time_point t);

// A stream buffer that writes to `console` unchanged and to a log file line by line,
// each line opened by its timestamp. A terminal's self-overwriting progress line
// ("\r", "\033[K", text without a newline) becomes one log line per update: a carriage
// return ends the log's open line and escape sequences are dropped. What is written
// before open() is kept (with the times it was written) and goes first into the file.
class RunLogBuffer final : public std::streambuf {
 public:
  explicit RunLogBuffer(std::ostream& console) : console_(console) {}
  // Starts the file at `path`, appending when `append` (a resumed run), else anew.
  void open(const std::string& path, bool append);

 protected:
  int overflow(int c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  void log(char c);
  void write(const std::string& text);

  std::ostream& console_;
  std::ofstream file_;
  std::string before_open_;  // the log's text until the file is open
  bool line_open_ = false;   // the log's current line has its timestamp
  bool in_escape_ = false;   // inside a terminal escape sequence ("\033[K")
};

}  // namespace amber
