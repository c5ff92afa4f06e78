#include "amber/data/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "amber/core/error.h"

namespace amber::data {
namespace {

std::string string_at(const nlohmann::json& j, const char* key, const std::string& where) {
  AMBER_CHECK(j.contains(key) && j[key].is_string(), where, ".", key, " must be a string");
  return j[key].get<std::string>();
}

// utf8proc's options for a Unicode normalization form, 0 for a name that is none.
utf8proc_option_t unicode_form(const std::string& name) {
  if (name == "NFC") return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (name == "NFD") return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (name == "NFKC") return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (name == "NFKD") return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  return static_cast<utf8proc_option_t>(0);
}

// `text` (valid UTF-8, which the tokenizer checks first) in a Unicode normalization form.
std::string normalize_unicode(const std::string& text, const std::string& form) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out, unicode_form(form));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  AMBER_CHECK(n >= 0, "the ", form, " normalizer failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& where) {
  Normalizer n;
  if (j.is_null()) return n;
  AMBER_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
              " must be null or an object with a string \"type\"");
  std::vector<std::pair<const nlohmann::json*, std::string>> steps;
  if (j["type"] == "Sequence") {
    AMBER_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), where, ".normalizers must be an array");
    n.sequence_ = true;
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      steps.emplace_back(&j["normalizers"][i], concat(where, ".normalizers[", i, "]"));
  } else {
    steps.emplace_back(&j, where);
  }
  for (const auto& [step, at] : steps) {
    const std::string type = step->is_object() ? step->value("type", std::string()) : std::string();
    Step s;
    if (unicode_form(type) != 0) {
      s.kind = Step::Kind::unicode;
      s.pattern = type;
    } else if (type == "Prepend") {
      s.kind = Step::Kind::prepend;
      s.content = string_at(*step, "prepend", at);
    } else if (type == "Replace") {
      const nlohmann::json& pattern = step->value("pattern", nlohmann::json());
      AMBER_CHECK(pattern.is_object() && pattern.contains("String") && pattern["String"].is_string() &&
                      !pattern["String"].get<std::string>().empty(),
                  at, ".pattern must be {\"String\": \"...\"} (a non-empty literal); amber does not replace by regex");
      s.pattern = pattern["String"].get<std::string>();
      s.content = string_at(*step, "content", at);
    } else {
      fail(at, ".type is \"", type, "\"; amber supports the normalizers NFC, NFD, NFKC, NFKD, Prepend and Replace (of a ",
           "literal string) and a Sequence of them");
    }
    n.steps_.push_back(std::move(s));
  }
  return n;
}

nlohmann::ordered_json Normalizer::to_json() const {
  std::vector<nlohmann::ordered_json> steps;
  for (const Step& s : steps_) {
    nlohmann::ordered_json j;
    if (s.kind == Step::Kind::unicode) {
      j["type"] = s.pattern;
    } else if (s.kind == Step::Kind::prepend) {
      j["type"] = "Prepend";
      j["prepend"] = s.content;
    } else {
      j["type"] = "Replace";
      j["pattern"] = {{"String", s.pattern}};
      j["content"] = s.content;
    }
    steps.push_back(std::move(j));
  }
  if (steps.empty() && !sequence_) return nullptr;
  if (steps.size() == 1 && !sequence_) return steps[0];
  return {{"type", "Sequence"}, {"normalizers", steps}};
}

std::string_view Normalizer::apply(std::string_view segment, std::string& storage) const {
  if (steps_.empty()) return segment;
  storage.assign(segment);
  std::string next;
  for (const Step& s : steps_) {
    if (s.kind == Step::Kind::unicode) {
      storage = normalize_unicode(storage, s.pattern);
      continue;
    }
    if (s.kind == Step::Kind::prepend) {
      if (!storage.empty()) storage.insert(0, s.content);
      continue;
    }
    next.clear();
    size_t from = 0;
    for (size_t at = storage.find(s.pattern); at != std::string::npos; at = storage.find(s.pattern, from)) {
      next.append(storage, from, at - from).append(s.content);
      from = at + s.pattern.size();
    }
    next.append(storage, from);
    storage.swap(next);
  }
  return storage;
}

}  // namespace amber::data
