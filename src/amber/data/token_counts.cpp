#include "amber/data/token_counts.h"

#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "amber/core/error.h"
#include "amber/data/shard.h"

namespace amber::data {
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const std::string& path, const char* remedy) {
  std::ifstream in(path);
  AMBER_CHECK(in.good(), "cannot read ", path, "; ", remedy);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, " is not valid JSON (", e.what(), "); ", remedy);
  }
}

}  // namespace

void TokenCounts::add_document(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    AMBER_CHECK(id >= 0, "token id ", id, " is negative");
    if (static_cast<size_t>(id) >= counts.size()) counts.resize(static_cast<size_t>(id) + 1, 0);
    counts[static_cast<size_t>(id)] += 1;
  }
  tokens += static_cast<int64_t>(ids.size());
  documents += 1;
}

TokenCounts count_shard_tokens(const std::vector<std::string>& shards) {
  TokenCounts out;
  for (const std::string& path : shards) {
    const Shard shard = Shard::open(path, false);
    if (out.counts.size() < static_cast<size_t>(shard.vocab_size()))
      out.counts.resize(static_cast<size_t>(shard.vocab_size()), 0);
    for (int64_t d = 0; d < shard.num_docs(); ++d) out.add_document(shard.document(d));
  }
  return out;
}

std::optional<TokenCounts> stored_token_counts(const std::string& dir, const std::string& split) {
  const char* remedy = "re-run amber tokenize into a fresh folder";
  const nlohmann::json manifest = read_json((fs::path(dir) / "manifest.json").string(), remedy);
  const std::string key = split + "_token_counts";
  if (!manifest.contains(key)) return std::nullopt;
  AMBER_CHECK(manifest[key].is_string(), dir, "/manifest.json: \"", key, "\" must name a file");
  const std::string path = (fs::path(dir) / manifest[key].get<std::string>()).string();
  const nlohmann::json j = read_json(path, remedy);
  TokenCounts out;
  try {
    out.counts = j.at("counts").get<std::vector<int64_t>>();
    out.documents = j.at("documents").get<int64_t>();
    out.tokens = j.at("tokens").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(path, " lacks a field (", e.what(), "); ", remedy);
  }
  AMBER_CHECK(std::accumulate(out.counts.begin(), out.counts.end(), int64_t{0}) == out.tokens, path,
              ": the counts do not add up to \"tokens\" (", out.tokens, "); the file is damaged: ", remedy);
  return out;
}

nlohmann::ordered_json token_counts_json(const TokenCounts& counts) {
  return {{"documents", counts.documents}, {"tokens", counts.tokens}, {"counts", counts.counts}};
}

}  // namespace amber::data
