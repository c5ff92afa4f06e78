// Config loading: one field table drives TOML parsing, --set overrides and dumping,
// so a new field is added in exactly one place (visit_fields).
#include "amber/model/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "amber/core/error.h"

namespace amber {
namespace {

template <class Visitor>
void visit_fields(ModelConfig& c, Visitor&& v) {
  v("vocab_size", c.vocab_size);
  v("dim", c.dim);
  v("depth", c.depth);
  v("heads", c.heads);
  v("kv_heads", c.kv_heads);
  v("head_dim", c.head_dim);
  v("mlp_ratio", c.mlp_ratio);
  v("mlp_hidden", c.mlp_hidden);
  v("mlp_multiple_of", c.mlp_multiple_of);
  v("max_position", c.max_position);
  v("norm", c.norm);
  v("mlp", c.mlp);
  v("attention", c.attention);
  v("posenc", c.posenc);
  v("norm_eps", c.norm_eps);
  v("qk_norm", c.qk_norm);
  v("qk_norm_affine", c.qk_norm_affine);
  v("attn_bias", c.attn_bias);
  v("attn_sink", c.attn_sink);
  v("sliding_window", c.sliding_window);
  v("global_layer_every", c.global_layer_every);
  v("window_pattern", c.window_pattern);
  v("rope_theta", c.rope_theta);
  v("rope_scaling", c.rope_scaling);
  v("rope_factor", c.rope_factor);
  v("rope_partial", c.rope_partial);
  v("tie_embeddings", c.tie_embeddings);
  v("embedding_scale", c.embedding_scale);
  v("z_loss_weight", c.z_loss_weight);
  v("loss_chunk_tokens", c.loss_chunk_tokens);
  v("post_norm", c.post_norm);
  v("scale_residual_by_depth", c.scale_residual_by_depth);
  v("init_std", c.init_std);
  v("depth_scaled_init", c.depth_scaled_init);
  v("mup_base_dim", c.mup_base_dim);
  v("recompute", c.recompute);
}

std::vector<std::string> field_names() {
  ModelConfig c;
  std::vector<std::string> names;
  visit_fields(c, [&](const char* name, auto&) { names.emplace_back(name); });
  return names;
}

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

[[noreturn]] void wrong_type(const std::string& where, const std::string& key, const char* want,
                             const toml::node& got) {
  fail(where, ": model.", key, " must be ", want, ", got ", type_name(got));
}

void assign(const toml::node& n, int& out, const std::string& where, const std::string& key) {
  const auto v = n.value_exact<int64_t>();
  if (!v) wrong_type(where, key, "an integer", n);
  AMBER_CHECK(*v >= INT32_MIN && *v <= INT32_MAX, where, ": model.", key, " = ", *v, " is out of range");
  out = static_cast<int>(*v);
}
void assign(const toml::node& n, double& out, const std::string& where, const std::string& key) {
  if (n.is_integer()) out = static_cast<double>(*n.value<int64_t>());
  else if (n.is_floating_point()) out = *n.value<double>();
  else wrong_type(where, key, "a number", n);
}
void assign(const toml::node& n, bool& out, const std::string& where, const std::string& key) {
  if (!n.is_boolean()) wrong_type(where, key, "true or false", n);
  out = *n.value<bool>();
}
void assign(const toml::node& n, std::string& out, const std::string& where, const std::string& key) {
  if (!n.is_string()) wrong_type(where, key, "a string", n);
  out = *n.value<std::string>();
}
void assign(const toml::node& n, std::vector<int>& out, const std::string& where, const std::string& key) {
  const toml::array* a = n.as_array();
  if (!a) wrong_type(where, key, "an array of integers", n);
  out.clear();
  for (const toml::node& e : *a) {
    int x = 0;
    assign(e, x, where, key + "[]");
    out.push_back(x);
  }
}

void apply_table(ModelConfig& c, const toml::table& model, const std::string& where) {
  const std::vector<std::string> names = field_names();
  for (const auto& [key_view, node] : model) {
    const std::string key(key_view.str());
    bool found = false;
    visit_fields(c, [&](const char* name, auto& field) {
      if (key != name) return;
      assign(node, field, where, key);
      found = true;
    });
    if (!found) {
      const std::string near = nearest_name(key, names);
      fail(where, ": unknown key model.", key,
           near.empty() ? std::string("; see docs/config.md for the valid keys")
                        : concat("; did you mean model.", near, "?"));
    }
  }
}

void load_into(ModelConfig& c, const std::filesystem::path& path, int depth) {
  AMBER_CHECK(depth < 16, path.string(), ": `extends` chain is longer than 16 files (a cycle?)");
  AMBER_CHECK(std::filesystem::exists(path), "config file ", path.string(), " does not exist");
  toml::table root;
  try {
    root = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << path.string() << ":" << e.source().begin.line << ":" << e.source().begin.column
        << ": TOML syntax error: " << e.description();
    throw Error(msg.str());
  }
  if (const auto* base = root.get("extends")) {
    AMBER_CHECK(base->is_string(), path.string(), ": extends must be a path string");
    load_into(c, path.parent_path() / *base->value<std::string>(), depth + 1);
  }
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    if (k == "extends") continue;
    if (k == "model") {
      AMBER_CHECK(node.is_table(), path.string(), ": model must be a table ([model])");
      apply_table(c, *node.as_table(), path.string());
      continue;
    }
    // Other sections belong to the trainer and data configs; they validate them.
    AMBER_CHECK(node.is_table(), path.string(), ": unexpected top-level key '", k,
                "'; model settings go in the [model] table");
  }
}

}  // namespace

int ModelConfig::resolved_mlp_hidden() const {
  if (mlp_hidden > 0) return mlp_hidden;
  double hidden = dim * mlp_ratio;
  if (mlp_is_gated()) hidden = hidden * 2.0 / 3.0;
  const int m = std::max(mlp_multiple_of, 1);
  return static_cast<int>(std::ceil(hidden / m)) * m;
}

std::vector<int> ModelConfig::layer_windows() const {
  std::vector<int> windows(static_cast<size_t>(depth), 0);
  for (int i = 0; i < depth; ++i) {
    if (!window_pattern.empty()) {
      windows[i] = window_pattern[i % window_pattern.size()];
    } else if (sliding_window > 0) {
      const bool global = global_layer_every > 0 && (i + 1) % global_layer_every == 0;
      windows[i] = global ? 0 : sliding_window;
    }
  }
  if (depth > 0) windows.back() = 0;  // the last layer always sees the whole document
  return windows;
}

double ModelConfig::residual_scale() const {
  return scale_residual_by_depth ? 1.0 / std::sqrt(static_cast<double>(depth)) : 1.0;
}

void ModelConfig::validate() const {
  auto positive = [](const char* key, double v) {
    AMBER_CHECK(v > 0, "model.", key, " must be positive, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("dim", dim);
  positive("depth", depth);
  positive("heads", heads);
  positive("max_position", max_position);
  positive("norm_eps", norm_eps);
  positive("init_std", init_std);
  positive("loss_chunk_tokens", loss_chunk_tokens);
  AMBER_CHECK(kv_heads >= 0 && head_dim >= 0 && mlp_hidden >= 0 && mup_base_dim >= 0,
              "model.kv_heads, head_dim, mlp_hidden and mup_base_dim must be >= 0 (0 = derived)");
  AMBER_CHECK(head_dim > 0 || dim % heads == 0, "model.heads = ", heads, " does not divide model.dim = ",
              dim, "; choose heads dividing dim or set model.head_dim explicitly");
  AMBER_CHECK(heads % resolved_kv_heads() == 0, "model.kv_heads = ", kv_heads,
              " does not divide model.heads = ", heads, " (grouped-query attention needs heads % kv_heads == 0)");
  AMBER_CHECK(mlp_hidden > 0 || (mlp_ratio > 0 && mlp_multiple_of > 0),
              "model.mlp_ratio and model.mlp_multiple_of must be positive when model.mlp_hidden is 0");
  AMBER_CHECK(sliding_window >= 0 && global_layer_every >= 0,
              "model.sliding_window and model.global_layer_every must be >= 0");
  for (int w : window_pattern)
    AMBER_CHECK(w >= 0, "model.window_pattern entries must be >= 0 (0 = global), got ", w);
  AMBER_CHECK(recompute == "none" || recompute == "block", "model.recompute = '", recompute,
              "' is not one of: none, block");
  AMBER_CHECK(rope_partial > 0 && rope_partial <= 1, "model.rope_partial must be in (0, 1], got ", rope_partial);
  AMBER_CHECK(z_loss_weight >= 0, "model.z_loss_weight must be >= 0, got ", z_loss_weight);
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    std::vector<size_t> row(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= c.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (word[i - 1] != c[j - 1])});
        diagonal = up;
      }
    }
    if (row[c.size()] < best_distance) best_distance = row[c.size()], best = c;
  }
  return best;
}

ModelConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  ModelConfig c;
  load_into(c, path, 0);
  for (const std::string& o : overrides) apply_model_override(c, o);
  c.validate();
  return c;
}

ModelConfig model_config_from_toml_string(const std::string& text, const std::string& origin) {
  ModelConfig c;
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    fail(origin, ":", e.source().begin.line, ": TOML syntax error: ", e.description());
  }
  if (const toml::table* model = root["model"].as_table()) apply_table(c, *model, origin);
  c.validate();
  return c;
}

void apply_model_override(ModelConfig& c, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  AMBER_CHECK(eq != std::string::npos && eq > 0, "--set '", assignment, "' must look like model.key=value");
  std::string key = assignment.substr(0, eq);
  if (key.rfind("model.", 0) == 0) key = key.substr(6);
  const std::string value = assignment.substr(eq + 1);
  // Parse the value as a TOML value so types follow TOML's rules; bare words are strings.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::parse("v = \"" + value + "\"");
  }
  toml::table model;
  model.insert(key, *parsed.get("v"));
  apply_table(c, model, "--set " + assignment);
}

std::string model_config_to_toml(const ModelConfig& config) {
  ModelConfig c = config;
  toml::table model;
  visit_fields(c, [&](const char* name, auto& field) {
    using F = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<F, std::vector<int>>) {
      toml::array a;
      for (int x : field) a.push_back(x);
      model.insert(name, a);
    } else {
      model.insert(name, field);
    }
  });
  toml::table root;
  root.insert("model", model);
  std::ostringstream out;
  out << root;
  return out.str();
}

}  // namespace amber
