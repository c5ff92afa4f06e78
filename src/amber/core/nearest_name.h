// The "did you mean" of every error about an unknown name (config keys, registry
// entries, parameter names): the closest valid name by edit distance.
#pragma once

#include <string>
#include <vector>

namespace amber {

// The closest of `candidates` to `word` by edit distance, or "" when none is close.
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace amber
