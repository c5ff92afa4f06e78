// Errors users can act on: every failure is an amber::Error whose message names the
// file, key or shape at fault and what to do about it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace amber {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(concat(std::forward<Parts>(parts)...));
}

}  // namespace amber

// AMBER_CHECK(cond, "what is wrong", value, "and how to fix it");
#define AMBER_CHECK(cond, ...)         \
  do {                                 \
    if (!(cond)) ::amber::fail(__VA_ARGS__); \
  } while (0)
