// Candidates are bucketed by first byte so ordinary text costs one table probe per byte.
#include "amber/data/added_tokens.h"

#include <algorithm>

namespace amber::data {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back({t.content, t.id, t.lstrip, t.rstrip});
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
  }
}

}  // namespace amber::data
