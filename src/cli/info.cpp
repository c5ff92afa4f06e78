// `amber info`: what this build can do and, given a config, the model it resolves
// to (shape, parameter counts and FLOPs per token for a chosen document length) and the
// whole run config it resolves to, every default written out.
#include <iomanip>
#include <iostream>

#include "amber/core/device.h"
#include "amber/core/error.h"
#include "amber/model/config.h"
#include "amber/model/flops.h"
#include "amber/train/run_config.h"
#include "cli/commands.h"

namespace amber::cli {
namespace {

struct InfoOptions {
  std::string config;
  std::vector<std::string> overrides;
  int document_length = 2048;
  int64_t tokens = 16384;
};

void print_build() {
#ifdef AMBER_WITH_CUDA
  std::cout << "build: CUDA backend compiled in; GPU visible: " << (cuda_available() ? "yes" : "no") << "\n";
#else
  std::cout << "build: CPU only (no CUDA backend compiled in)\n";
#endif
}

void print_model(const InfoOptions& o, const ModelConfig& c) {
  const int64_t total = count_parameters(c);
  const int64_t embedding = int64_t{c.vocab_size} * c.dim * (c.tie_embeddings ? 1 : 2);
  std::cout << "config: " << o.config << "\n"
            << "  shape: dim " << c.dim << ", depth " << c.depth << ", heads " << c.heads << "/"
            << c.resolved_kv_heads() << " (head_dim " << c.resolved_head_dim() << "), mlp " << c.mlp
            << " hidden " << c.resolved_mlp_hidden() << ", vocab " << c.vocab_size << "\n"
            << "  components: norm " << c.norm << ", attention " << c.attention << ", posenc " << c.posenc
            << (c.qk_norm ? ", qk_norm" : "") << (c.attn_sink ? ", sinks" : "")
            << (c.tie_embeddings ? ", tied embeddings" : ", untied embeddings") << ", recompute "
            << c.recompute << "\n"
            << "  projections: attention " << c.attention_recipe << ", mlp " << c.mlp_recipe
            << " (and MoE shared experts), routed experts " << c.expert_recipe << ", head compute_dtype\n";
  if (c.moe_experts > 0) {
    int sparse = 0;
    for (int l = 0; l < c.depth; ++l) sparse += c.layer_is_sparse(l);
    std::cout << "  experts: " << sparse << " of " << c.depth << " layers sparse (first " << c.moe_first_dense
              << " dense, then every " << c.moe_every << "), " << c.moe_experts << " experts of width "
              << c.moe_hidden << ", top-" << c.moe_top_k << " routed + " << c.moe_shared_experts << " shared, router "
              << c.moe_router << (c.moe_normalize ? " (normalized" : " (unnormalized") << ", scaling "
              << c.moe_routed_scaling << ")\n";
  }
  std::cout << "  windows per layer:";
  for (int w : c.layer_windows()) std::cout << ' ' << (w == 0 ? std::string("global") : std::to_string(w));
  std::cout << "\n" << std::fixed << std::setprecision(2)
            << "  parameters: " << total / 1e6 << "M total, " << count_active_parameters(c) / 1e6
            << "M active per token, " << embedding / 1e6 << "M embedding, " << (total - embedding) / 1e6
            << "M non-embedding\n";
  AMBER_CHECK(o.document_length > 0 && o.tokens >= o.document_length,
              "--doc-len must be positive and at most --tokens");
  const std::vector<int32_t> lengths(static_cast<size_t>(o.tokens / o.document_length), o.document_length);
  const FlopCount f = count_flops(c, lengths);
  const double n = static_cast<double>(lengths.size()) * o.document_length;
  // Small models in MFLOP, so that their figures keep digits.
  const bool giga = f.model / n >= 1e9;
  const double unit = n * (giga ? 1e9 : 1e6);
  const char* name = giga ? " GFLOP" : " MFLOP";
  std::cout << "  FLOPs per token (documents of " << o.document_length << "): model " << f.model / unit << name
            << " (dense " << 3 * f.dense_forward / unit << ", attention " << 3 * f.attention_forward / unit
            << ", head " << 3 * f.head_forward / unit << "), hardware " << f.hardware / unit << name << "\n";
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  auto* cmd = app.add_subcommand("info", "Show build capabilities and, with --config, the resolved model and run config");
  cmd->add_option("--config", options->config, "Run or model config (TOML)")->check(CLI::ExistingFile);
  cmd->add_option("--set", options->overrides, "Override a config value, e.g. --set model.depth=4 (repeatable)");
  cmd->add_option("--doc-len", options->document_length, "Document length for the FLOP estimate")
      ->capture_default_str();
  cmd->add_option("--tokens", options->tokens, "Micro-batch tokens for the FLOP estimate")->capture_default_str();
  cmd->callback([options] {
    print_build();
    if (options->config.empty()) return;
    // A model-only file (a preset) resolves too: the other tables take their defaults.
    const RunConfig config = load_run_config(options->config, options->overrides);
    print_model(*options, config.model);
    std::cout << "\nresolved run config (as train.out_dir/config.toml will hold it):\n"
              << run_config_to_toml(config);
  });
}

}  // namespace amber::cli
