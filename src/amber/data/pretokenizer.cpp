// PCRE2 (UTF + UCP, JIT-compiled) stands in for the Oniguruma engine Hugging Face uses;
// both give \s, \p{L} and \p{N} their Unicode meaning, which the compatibility test pins.
#include "amber/data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>

#include "amber/core/error.h"

namespace amber::data {

class Regex {
 public:
  Regex(std::string_view pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2 refuses UCP together with LITERAL, and a literal has no classes to widen.
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                          &error, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail(where, ": regex does not compile at offset ", offset, ": ", reinterpret_cast<char*>(message),
           "; pattern: ", pattern);
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(start, end) for each non-empty match, left to right.
  template <class Fn>
  void for_each_match(std::string_view subject, Fn&& fn) const {
    // No pattern here needs capture groups, so one ovector pair per thread is enough
    // (pcre2_match returns 0 rather than failing when groups do not fit).
    thread_local pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    // PCRE2's default limits (10M backtracks, 20 MB of heap) stop at whitespace runs of a
    // few million characters, which these patterns match in time proportional to the
    // run; so the limits grow with the text, and only a pattern that backtracks far
    // beyond linear still fails (reported, with its document, by the caller).
    thread_local pcre2_match_context* context = pcre2_match_context_create(nullptr);
    const auto limit = [](size_t base, size_t grow) {
      return static_cast<uint32_t>(std::min<size_t>(base + grow, UINT32_MAX));
    };
    pcre2_set_match_limit(context, limit(10'000'000, 16 * subject.size()));
    pcre2_set_heap_limit(context, limit(20'000, subject.size() / 8));  // KiB
    auto subject_ptr = reinterpret_cast<PCRE2_SPTR>(subject.data());
    size_t start = 0;
    while (start < subject.size()) {
      uint32_t options = PCRE2_NO_UTF_CHECK | (jit_ ? 0 : PCRE2_NO_JIT);
      int rc = pcre2_match(code_, subject_ptr, subject.size(), start, options, data, context);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // Pathological inputs (huge whitespace runs) can exhaust the JIT stack; the
        // interpreter, bounded by the limits above instead, gives the same match.
        rc = pcre2_match(code_, subject_ptr, subject.size(), start, options | PCRE2_NO_JIT, data, context);
      }
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        // PCRE2's match and heap limits bound the work per match; a text that exceeds
        // them (a pathological run of characters) is reported rather than cut silently.
        fail("the pre-tokenizer's regex gave up at byte ", start, " of a ", subject.size(), "-byte text: ",
             reinterpret_cast<char*>(message), " (a PCRE2 limit)");
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      if (ov[1] == ov[0]) {
        // An empty match: step over one whole character so matching stays on boundaries.
        start = ov[0] + 1;
        while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80) ++start;
        continue;
      }
      fn(ov[0], ov[1]);
      start = ov[1];
    }
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

namespace {

// Hugging Face's Isolated behaviour: every match is a piece, and so is every gap.
void split_isolated(const Regex& regex, std::string_view text, std::vector<std::string_view>& out) {
  size_t last = 0;
  regex.for_each_match(text, [&](size_t start, size_t end) {
    if (start > last) out.push_back(text.substr(last, start - last));
    out.push_back(text.substr(start, end - start));
    last = end;
  });
  if (last < text.size()) out.push_back(text.substr(last));
}

std::shared_ptr<const Regex> gpt2_regex() {
  static const auto regex = std::make_shared<const Regex>(kGpt2Pattern, false, "ByteLevel pre-tokenizer");
  return regex;
}

PreTokenizer::Step byte_level_step(bool add_prefix_space, bool use_regex, bool trim_offsets) {
  PreTokenizer::Step s;
  s.kind = PreTokenizer::Step::Kind::byte_level;
  s.add_prefix_space = add_prefix_space;
  s.use_regex = use_regex;
  s.trim_offsets = trim_offsets;
  if (use_regex) s.regex = gpt2_regex();
  return s;
}

PreTokenizer::Step split_step(std::string pattern, bool literal, const std::string& where) {
  PreTokenizer::Step s;
  s.kind = PreTokenizer::Step::Kind::split;
  s.regex = std::make_shared<const Regex>(pattern, literal, where);
  s.pattern = std::move(pattern);
  s.literal = literal;
  return s;
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  AMBER_CHECK(j[key].is_boolean(), where, ".", key, " must be true or false");
  return j[key].get<bool>();
}

// SentencePiece's spelling of spaces: ' ' becomes the replacement ("▁"), which also
// starts the text (prepend_scheme "first"), every piece ("always") or nothing ("never");
// with split_words each replacement starts a new piece. Older files say
// add_prefix_space: true for "always".
PreTokenizer::Step metaspace_step(const nlohmann::json& j, const std::string& where) {
  PreTokenizer::Step s;
  s.kind = PreTokenizer::Step::Kind::metaspace;
  AMBER_CHECK(!j.contains("replacement") ||
                  (j["replacement"].is_string() && !j["replacement"].get<std::string>().empty()),
              where, ".replacement must be a non-empty string");
  s.pattern = j.value("replacement", std::string("\xe2\x96\x81"));  // U+2581, SentencePiece's "▁"
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    AMBER_CHECK(j["prepend_scheme"].is_string(), where, ".prepend_scheme must be a string");
    s.prepend_scheme = j["prepend_scheme"].get<std::string>();
    AMBER_CHECK(s.prepend_scheme == "always" || s.prepend_scheme == "first" || s.prepend_scheme == "never", where,
                ".prepend_scheme is \"", s.prepend_scheme, "\"; it must be \"always\", \"first\" or \"never\"");
  } else {
    s.prepend_scheme = get_bool(j, "add_prefix_space", true, where) ? "always" : "never";
  }
  s.split_words = get_bool(j, "split", true, where);
  return s;
}

// `piece` in the Metaspace spelling, into scratch; `first` when it begins the text.
void metaspace_pieces(const PreTokenizer::Step& s, std::string_view piece, bool first,
                      std::vector<std::string_view>& out, std::deque<std::string>& scratch) {
  std::string& text = scratch.emplace_back();
  for (char c : piece) {
    if (c == ' ') text += s.pattern;
    else text += c;
  }
  const bool prepend = s.prepend_scheme == "always" || (s.prepend_scheme == "first" && first);
  if (prepend && !std::string_view(text).starts_with(s.pattern)) text.insert(0, s.pattern);
  const std::string_view all = text;
  if (!s.split_words) {
    if (!all.empty()) out.push_back(all);
    return;
  }
  // Each replacement starts a piece (Hugging Face's MergedWithNext).
  size_t begin = 0;
  for (size_t at = all.find(s.pattern, 1); at != std::string_view::npos; at = all.find(s.pattern, at + 1)) {
    out.push_back(all.substr(begin, at - begin));
    begin = at;
  }
  if (begin < all.size()) out.push_back(all.substr(begin));
}

PreTokenizer::Step step_from_json(const nlohmann::json& j, const std::string& where) {
  AMBER_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
              " must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") {
    return byte_level_step(get_bool(j, "add_prefix_space", false, where), get_bool(j, "use_regex", true, where),
                           get_bool(j, "trim_offsets", true, where));
  }
  if (type == "Metaspace") return metaspace_step(j, where);
  if (type == "Split") {
    AMBER_CHECK(j.contains("pattern") && j["pattern"].is_object(), where,
                ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    const auto& p = j["pattern"];
    const bool literal = p.contains("String");
    AMBER_CHECK((literal || p.contains("Regex")) && p.begin().value().is_string(), where,
                ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    AMBER_CHECK(behavior == "Isolated", where, ".behavior is \"", behavior,
                "\"; amber supports only \"Isolated\" (the form GPT-2 and Llama-3 style files use)");
    AMBER_CHECK(!get_bool(j, "invert", false, where), where, ".invert is true; amber supports only invert=false");
    return split_step(p.begin().value().get<std::string>(), literal, where + ".pattern");
  }
  fail(where, ".type is \"", type,
       "\"; amber supports the pre-tokenizers ByteLevel, Split (Isolated), Metaspace and a Sequence of them");
}

}  // namespace

PreTokenizer PreTokenizer::gpt2(bool add_prefix_space) {
  PreTokenizer p;
  p.steps_.push_back(byte_level_step(add_prefix_space, true, true));
  return p;
}

PreTokenizer PreTokenizer::llama3() {
  PreTokenizer p;
  p.sequence_ = true;
  p.steps_.push_back(split_step(std::string(kLlama3Pattern), false, "Llama-3 pre-tokenizer"));
  p.steps_.push_back(byte_level_step(false, false, false));
  return p;
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& where) {
  PreTokenizer p;
  if (j.is_null()) return p;
  if (j.is_object() && j.value("type", std::string()) == "Sequence") {
    AMBER_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), where,
                ".pretokenizers must be an array");
    p.sequence_ = true;
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
      p.steps_.push_back(step_from_json(j["pretokenizers"][i], concat(where, ".pretokenizers[", i, "]")));
    }
  } else {
    p.steps_.push_back(step_from_json(j, where));
  }
  for (size_t i = 0; i + 1 < p.steps_.size(); ++i) {
    // The model reads byte-level pieces as raw bytes, so nothing may split after the mapping.
    AMBER_CHECK(p.steps_[i].kind != Step::Kind::byte_level, where,
                ": ByteLevel must be the last pre-tokenizer of the Sequence");
  }
  return p;
}

nlohmann::ordered_json PreTokenizer::to_json() const {
  std::vector<nlohmann::ordered_json> steps;
  for (const Step& s : steps_) {
    nlohmann::ordered_json j;
    if (s.kind == Step::Kind::byte_level) {
      j["type"] = "ByteLevel";
      j["add_prefix_space"] = s.add_prefix_space;
      j["trim_offsets"] = s.trim_offsets;
      j["use_regex"] = s.use_regex;
    } else if (s.kind == Step::Kind::metaspace) {
      j["type"] = "Metaspace";
      j["replacement"] = s.pattern;
      j["prepend_scheme"] = s.prepend_scheme;
      j["split"] = s.split_words;
    } else {
      j["type"] = "Split";
      j["pattern"] = {{s.literal ? "String" : "Regex", s.pattern}};
      j["behavior"] = "Isolated";
      j["invert"] = false;
    }
    steps.push_back(std::move(j));
  }
  if (steps.empty()) return nullptr;
  if (steps.size() == 1 && !sequence_) return steps[0];
  nlohmann::ordered_json j;
  j["type"] = "Sequence";
  j["pretokenizers"] = steps;
  return j;
}

bool PreTokenizer::byte_level() const {
  return !steps_.empty() && steps_.back().kind == Step::Kind::byte_level;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& scratch,
                         bool at_text_start) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const Step& s : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      if (s.kind == Step::Kind::metaspace) {
        metaspace_pieces(s, piece, at_text_start && piece.data() == text.data(), next, scratch);
        continue;
      }
      if (s.kind == Step::Kind::byte_level && s.add_prefix_space && piece.front() != ' ') {
        scratch.push_back(" ");
        scratch.back().append(piece);
        piece = scratch.back();
      }
      if (s.regex) {
        split_isolated(*s.regex, piece, next);
      } else {
        next.push_back(piece);
      }
    }
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace amber::data
