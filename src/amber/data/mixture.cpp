// The sampling key is fixed, so a document's copies are the same in every run; the copies
// are identical texts, so they always land in the same split (train or val).
#include "amber/data/mixture.h"

#include <charconv>
#include <cmath>
#include <filesystem>

#include "amber/core/error.h"
#include "amber/data/permutation.h"

namespace amber::data {
namespace {

constexpr uint64_t kMixtureKey = 0x6d69787475726521ull;  // "mixture!"
constexpr double kMaxWeight = 1000;

}  // namespace

CorpusInput parse_corpus_input(std::string_view arg) {
  std::error_code ec;
  const size_t colon = arg.rfind(':');
  if (colon == std::string_view::npos || std::filesystem::exists(std::string(arg), ec)) return {std::string(arg)};
  const std::string_view number = arg.substr(colon + 1);
  double weight = 0;
  const auto [end, err] = std::from_chars(number.data(), number.data() + number.size(), weight);
  if (err != std::errc() || end != number.data() + number.size()) return {std::string(arg)};  // a path with a colon
  AMBER_CHECK(colon > 0, "--input ", arg, " names no path before its weight; write PATH:WEIGHT");
  AMBER_CHECK(std::isfinite(weight) && weight > 0 && weight <= kMaxWeight, "--input ", arg, ": the weight ", number,
              " must be in (0, ", kMaxWeight, "]; it is how many times each document is written, on average");
  return {std::string(arg.substr(0, colon)), weight};
}

int mixture_copies(std::string_view text, double weight) {
  const double whole = std::floor(weight);
  return static_cast<int>(whole) + (text_fraction(text, kMixtureKey) < weight - whole ? 1 : 0);
}

}  // namespace amber::data
