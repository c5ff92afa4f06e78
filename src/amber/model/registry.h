// Registry: component names to factories, resolved once when a model is built
// ("select, do not dispatch"). Each kind of component has one registry, filled with
// the built-in implementations where it is first used.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "amber/core/error.h"
#include "amber/core/nearest_name.h"

namespace amber {

template <class Product, class... Args>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Product>(Args...)>;

  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  void add(const std::string& name, Factory factory) {
    AMBER_CHECK(!factories_.count(name), kind_, " '", name, "' is registered twice");
    factories_[name] = std::move(factory);
  }

  std::unique_ptr<Product> build(const std::string& name, Args... args) const {
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      std::string valid;
      for (const std::string& n : names()) valid += (valid.empty() ? "" : ", ") + n;
      const std::string near = nearest_name(name, names());
      fail("unknown ", kind_, " '", name, "'; valid: ", valid,
           near.empty() ? std::string() : concat(" (did you mean '", near, "'?)"));
    }
    return it->second(std::forward<Args>(args)...);
  }

  bool contains(const std::string& name) const { return factories_.count(name) > 0; }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : factories_) out.push_back(name);
    return out;
  }

 private:
  std::string kind_;
  std::map<std::string, Factory> factories_;
};

}  // namespace amber
