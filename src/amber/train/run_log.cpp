#include "amber/train/run_log.h"

#include <cctype>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "amber/core/error.h"

namespace amber {

std::string utc_timestamp(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const std::time_t seconds = system_clock::to_time_t(t);
  const int64_t ms = duration_cast<milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  std::ostringstream out;
  out << std::put_time(&utc, "%Y-%m-%dT%H:%M:%S") << '.' << std::setw(3) << std::setfill('0') << ms << 'Z';
  return out.str();
}

void RunLogBuffer::open(const std::string& path, bool append) {
  file_.open(path, append ? std::ios::app : std::ios::trunc);
  AMBER_CHECK(file_, "cannot write the run log ", path);
  file_ << before_open_;
  file_.flush();
  before_open_.clear();
}

int RunLogBuffer::overflow(int c) {
  if (c == traits_type::eof()) return traits_type::not_eof(c);
  console_.put(static_cast<char>(c));
  log(static_cast<char>(c));
  return c;
}

std::streamsize RunLogBuffer::xsputn(const char* s, std::streamsize n) {
  console_.write(s, n);
  for (std::streamsize i = 0; i < n; ++i) log(s[i]);
  return n;
}

int RunLogBuffer::sync() {
  console_.flush();
  if (file_.is_open()) file_.flush();
  return 0;
}

void RunLogBuffer::log(char c) {
  if (in_escape_) {
    in_escape_ = std::isalpha(static_cast<unsigned char>(c)) == 0;  // "\033[K" ends at its letter
    return;
  }
  if (c == '\033') {
    in_escape_ = true;
    return;
  }
  if (c == '\r' || c == '\n') {
    // A carriage return ends a progress line the terminal would overwrite; the log keeps it.
    if (line_open_ || c == '\n') write(line_open_ ? "\n" : utc_timestamp(std::chrono::system_clock::now()) + "\n");
    line_open_ = false;
    return;
  }
  if (!line_open_) write(utc_timestamp(std::chrono::system_clock::now()) + " ");
  line_open_ = true;
  write(std::string(1, c));
}

void RunLogBuffer::write(const std::string& text) {
  if (!file_.is_open()) {
    before_open_ += text;
    return;
  }
  file_ << text;
  if (text.back() == '\n') file_.flush();
}

}  // namespace amber
