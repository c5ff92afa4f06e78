// Encoding caches the ids of each distinct piece per thread: natural text repeats its
// words, so most pieces skip the merge loop entirely.
#include "amber/data/tokenizer.h"

#include <atomic>
#include <deque>
#include <unordered_map>

#include "amber/core/error.h"
#include "amber/data/byte_level.h"
#include "amber/data/utf8.h"

namespace amber::data {
namespace {

std::atomic<uint64_t> next_instance{1};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct PieceCache {
  static constexpr size_t kMaxEntries = 1 << 18;  // bounds memory on endless unique pieces
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids;
};

}  // namespace

Tokenizer::Tokenizer(BpeModel model, PreTokenizer pre_tokenizer, std::vector<AddedToken> added_tokens,
                     Normalizer normalizer, SpaceDecoding spaces)
    : model_(std::move(model)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      added_tokens_(std::move(added_tokens)),
      normalizer_(std::move(normalizer)),
      spaces_(std::move(spaces)),
      matcher_(added_tokens_),
      instance_(next_instance.fetch_add(1)) {
  AMBER_CHECK(model_.options().byte_level == pre_tokenizer_.byte_level(),
              "the BPE model's byte_level flag must match whether the pre-tokenizer ends in ByteLevel");
  vocab_size_ = model_.vocab_size();
  for (const AddedToken& t : added_tokens_) {
    AMBER_CHECK(t.id >= 0 && !t.content.empty(), "added token \"", t.content, "\" needs an id >= 0 and non-empty text");
    vocab_size_ = std::max(vocab_size_, t.id + 1);
  }
  added_index_.assign(vocab_size_, -1);
  for (size_t i = 0; i < added_tokens_.size(); ++i) added_index_[added_tokens_[i].id] = static_cast<int32_t>(i);
}

void Tokenizer::encode_text(std::string_view segment, bool at_text_start, std::vector<int32_t>& out) const {
  thread_local PieceCache cache;
  if (cache.owner != instance_ || cache.ids.size() > PieceCache::kMaxEntries) {
    cache.ids.clear();
    cache.owner = instance_;
  }
  std::vector<std::string_view> pieces;
  std::deque<std::string> scratch;
  std::string normalized;
  pre_tokenizer_.split(normalizer_.apply(segment, normalized), pieces, scratch, at_text_start);
  for (std::string_view piece : pieces) {
    auto it = cache.ids.find(piece);
    if (it == cache.ids.end()) {
      std::vector<int32_t> ids;
      model_.encode_piece(piece, ids);
      it = cache.ids.emplace(std::string(piece), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const size_t bad = utf8_first_invalid(text);
  AMBER_CHECK(bad == text.size(), "text to encode is not valid UTF-8 at byte ", bad,
              "; convert the input to UTF-8 first");
  matcher_.split(
      text, [&](std::string_view segment) { encode_text(segment, segment.data() == text.data(), out); },
      [&](int32_t id) { out.push_back(id); });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  const bool byte_level = model_.options().byte_level;
  const bool byte_fallback = model_.options().byte_fallback;
  // A token's text with the spelled spaces turned back into spaces.
  const auto append_text = [&](const std::string& token, bool first) {
    if (spaces_.replacement.empty()) {
      out += token;
      return;
    }
    size_t from = 0;
    for (size_t at = token.find(spaces_.replacement); at != std::string::npos;
         at = token.find(spaces_.replacement, from)) {
      out.append(token, from, at - from);
      if (!(first && spaces_.first_token_drops)) out += ' ';
      from = at + spaces_.replacement.size();
    }
    out.append(token, from);
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    AMBER_CHECK(id >= 0 && id < vocab_size_, "token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")");
    if (added_index_[id] >= 0) {
      append_text(added_tokens_[added_index_[id]].content, i == 0);
      continue;
    }
    AMBER_CHECK(id < model_.vocab_size() && !model_.id_to_token(id).empty(), "token id ", id,
                " has no token in this tokenizer's vocabulary");
    const int byte = byte_fallback ? model_.byte_fallback_value(id) : -1;
    if (byte >= 0) out += static_cast<char>(byte);
    else if (byte_level) byte_level_decode(model_.id_to_token(id), out);
    else append_text(model_.id_to_token(id), i == 0);
  }
  size_t strip = 0;
  while (strip < out.size() && static_cast<int>(strip) < spaces_.strip_leading && out[strip] == ' ') ++strip;
  return out.erase(0, strip);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  const int32_t id = model_.token_to_id(token);
  if (id >= 0) return id;
  return std::nullopt;
}

}  // namespace amber::data
