#include "amber/core/toml_fields.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>

#include "amber/core/nearest_name.h"

namespace amber {
namespace {

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

[[noreturn]] void wrong_type(const std::string& where, const std::string& key, const char* want, const toml::node& got) {
  fail(where, ": ", key, " must be ", want, ", got ", type_name(got));
}

toml::table read_one(const std::filesystem::path& path, int depth) {
  AMBER_CHECK(depth < 16, path.string(), ": `extends` chain is longer than 16 files (a cycle?)");
  AMBER_CHECK(std::filesystem::exists(path), "config file ", path.string(), " does not exist");
  AMBER_CHECK(!std::filesystem::is_directory(path), "config file ", path.string(),
              " is a directory; give the path of a .toml file");
  toml::table root;
  try {
    root = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    fail(path.string(), ":", e.source().begin.line, ":", e.source().begin.column,
         ": TOML syntax error: ", e.description());
  }
  const toml::node* base = root.get("extends");
  if (!base) return root;
  AMBER_CHECK(base->is_string(), path.string(), ": extends must be a path string");
  toml::table merged = read_one(path.parent_path() / *base->value<std::string>(), depth + 1);
  for (const auto& [key, node] : root) {
    if (key.str() == "extends") continue;
    toml::table* section = merged[key].as_table();
    if (section && node.is_table()) {
      for (const auto& [k, v] : *node.as_table()) section->insert_or_assign(k, v);
    } else {
      merged.insert_or_assign(key, node);
    }
  }
  return merged;
}

}  // namespace

toml::table read_toml_with_extends(const std::string& path) { return read_one(path, 0); }

void apply_override(toml::table& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  const size_t dot = assignment.find('.');
  AMBER_CHECK(eq != std::string::npos && dot != std::string::npos && dot < eq && dot > 0 && eq > dot + 1,
              "--set '", assignment, "' must look like section.key=value (e.g. model.depth=4)");
  const std::string section = assignment.substr(0, dot), key = assignment.substr(dot + 1, eq - dot - 1);
  const std::string value = assignment.substr(eq + 1);
  const std::string where = concat("--set ", section, ".", key);
  AMBER_CHECK(value.find_first_of("\r\n") == std::string::npos, where,
              ": the value contains a line break; give one TOML value on one line");
  // The value is a TOML value (3, 1e-3, true, "text", [1, 2]); anything else is taken as
  // a bare string, except text that opens a quoted string or an array and does not parse.
  std::optional<toml::table> parsed;
  try {
    parsed = toml::parse("v = " + value);
    if (parsed->size() != 1) parsed.reset();
  } catch (const toml::parse_error& e) {
    AMBER_CHECK(value.empty() || (value[0] != '"' && value[0] != '\'' && value[0] != '['), where, ": value ",
                value, " is not valid TOML (", e.description(), ")");
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* table = root[section].as_table();
  AMBER_CHECK(table, "--set ", assignment, ": ", section, " is not a table");
  if (parsed) table->insert_or_assign(key, *parsed->get("v"));
  else table->insert_or_assign(key, value);
}

toml::table read_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root = read_toml_with_extends(path);
  for (const std::string& o : overrides) apply_override(root, o);
  return root;
}

toml::table parse_toml_text(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    fail(origin, ":", e.source().begin.line, ": TOML syntax error: ", e.description());
  }
}

std::string toml_to_string(const toml::table& root) {
  std::ostringstream out;
  out << root;
  return out.str();
}

void check_sections(const toml::table& root, const std::vector<std::string>& sections, const std::string& where) {
  for (const auto& [key_view, node] : root) {
    const std::string key(key_view.str());
    if (key == "extends" || std::find(sections.begin(), sections.end(), key) != sections.end()) continue;
    const std::string near = nearest_name(key, sections);
    fail(where, ": unknown section '", key, "'", near.empty() ? "" : concat("; did you mean [", near, "]?"));
  }
}

namespace toml_fields {

void assign(const toml::node& n, int& out, const std::string& key, const std::string& where) {
  const auto v = n.value_exact<int64_t>();
  if (!v) wrong_type(where, key, "an integer", n);
  AMBER_CHECK(*v >= INT32_MIN && *v <= INT32_MAX, where, ": ", key, " = ", *v, " is out of range");
  out = static_cast<int>(*v);
}
void assign(const toml::node& n, int64_t& out, const std::string& key, const std::string& where) {
  const auto v = n.value_exact<int64_t>();
  if (!v) wrong_type(where, key, "an integer", n);
  out = *v;
}
void assign(const toml::node& n, uint64_t& out, const std::string& key, const std::string& where) {
  const auto v = n.value_exact<int64_t>();
  if (!v || *v < 0) wrong_type(where, key, "a non-negative integer", n);
  out = static_cast<uint64_t>(*v);
}
void assign(const toml::node& n, double& out, const std::string& key, const std::string& where) {
  if (n.is_integer()) out = static_cast<double>(*n.value<int64_t>());
  else if (n.is_floating_point()) out = *n.value<double>();
  else wrong_type(where, key, "a number", n);
}
void assign(const toml::node& n, bool& out, const std::string& key, const std::string& where) {
  if (!n.is_boolean()) wrong_type(where, key, "true or false", n);
  out = *n.value<bool>();
}
void assign(const toml::node& n, std::string& out, const std::string& key, const std::string& where) {
  if (!n.is_string()) wrong_type(where, key, "a string", n);
  out = *n.value<std::string>();
}
void assign(const toml::node& n, std::vector<int>& out, const std::string& key, const std::string& where) {
  const toml::array* a = n.as_array();
  if (!a) wrong_type(where, key, "an array of integers", n);
  out.clear();
  for (const toml::node& e : *a) {
    int x = 0;
    assign(e, x, key + "[]", where);
    out.push_back(x);
  }
}
void assign(const toml::node& n, std::vector<std::string>& out, const std::string& key, const std::string& where) {
  const toml::array* a = n.as_array();
  if (!a) wrong_type(where, key, "an array of strings", n);
  out.clear();
  for (const toml::node& e : *a) {
    std::string x;
    assign(e, x, key + "[]", where);
    out.push_back(x);
  }
}

}  // namespace toml_fields
}  // namespace amber
