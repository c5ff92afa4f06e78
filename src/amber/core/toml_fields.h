// Binding TOML tables to typed config structs. A struct lists its fields once in a
// visitor (`v("name", field)`); these helpers read a table into it (unknown keys are
// errors naming the nearest valid key), apply `--set section.key=value` overrides and
// dump it back, so every config section behaves the same way.
#pragma once

#include <toml++/toml.h>

#include <string>
#include <vector>

#include "amber/core/error.h"
#include "amber/core/nearest_name.h"

namespace amber {

// Reads `path`, following `extends = "base.toml"` (relative to the file): the base is
// read first and every key the file sets replaces the base's value.
toml::table read_toml_with_extends(const std::string& path);

// Applies "section.key=value" to `root`; the value is read as a TOML value, and a
// bare word as a string.
void apply_override(toml::table& root, const std::string& assignment);

// read_toml_with_extends, then every override in order.
toml::table read_config_file(const std::string& path, const std::vector<std::string>& overrides);
// Parses TOML text (e.g. a config stored in a checkpoint); errors name `origin`.
toml::table parse_toml_text(const std::string& text, const std::string& origin);

// A table as TOML text.
std::string toml_to_string(const toml::table& root);

// Errors on top-level keys that are not one of `sections` (or `extends`).
void check_sections(const toml::table& root, const std::vector<std::string>& sections, const std::string& where);

namespace toml_fields {

void assign(const toml::node& n, int& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, int64_t& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, uint64_t& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, double& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, bool& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, std::string& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, std::vector<int>& out, const std::string& key, const std::string& where);
void assign(const toml::node& n, std::vector<std::string>& out, const std::string& key, const std::string& where);

template <class T>
void insert(toml::table& t, const char* name, const T& value) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    t.insert(name, static_cast<int64_t>(value));
  } else if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<std::string>>) {
    toml::array a;
    for (const auto& x : value) a.push_back(x);
    t.insert(name, a);
  } else {
    t.insert(name, value);
  }
}

}  // namespace toml_fields

// Reads root[section] into the fields `visit` exposes: visit(fn) calls fn(name, field)
// for every field.
template <class Visit>
void bind_section(const toml::table& root, const std::string& section, const std::string& where, Visit visit) {
  const toml::node* node = root.get(section);
  if (!node) return;
  AMBER_CHECK(node->is_table(), where, ": ", section, " must be a table ([", section, "])");
  std::vector<std::string> names;
  visit([&](const char* name, auto&) { names.emplace_back(name); });
  for (const auto& entry : *node->as_table()) {  // no structured binding: clang 14 cannot capture one
    const std::string key(entry.first.str());
    const toml::node& value = entry.second;
    bool found = false;
    visit([&](const char* name, auto& field) {
      if (key != name) return;
      toml_fields::assign(value, field, section + "." + key, where);
      found = true;
    });
    if (!found) {
      const std::string near = nearest_name(key, names);
      fail(where, ": unknown key ", section, ".", key,
           near.empty() ? std::string("; see docs/config.md for the valid keys")
                        : concat("; did you mean ", section, ".", near, "?"));
    }
  }
}

template <class Visit>
toml::table dump_section(Visit visit) {
  toml::table t;
  visit([&](const char* name, auto& field) { toml_fields::insert(t, name, field); });
  return t;
}

}  // namespace amber
