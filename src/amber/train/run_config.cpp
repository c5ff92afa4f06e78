#include "amber/train/run_config.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "amber/core/toml_fields.h"

namespace amber {
namespace {

RunConfig bind_run_config(const toml::table& root, const std::string& where) {
  check_sections(root, {"model", "train", "optimizer", "schedule", "data"}, where);
  RunConfig c;
  bind_section(root, "model", where, [&](auto&& fn) { c.model.fields(fn); });
  bind_section(root, "train", where, [&](auto&& fn) { c.train.fields(fn); });
  bind_section(root, "optimizer", where, [&](auto&& fn) { c.optimizer.fields(fn); });
  bind_section(root, "schedule", where, [&](auto&& fn) { c.schedule.fields(fn); });
  bind_section(root, "data", where, [&](auto&& fn) { c.data.fields(fn); });
  c.validate();
  return c;
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  AMBER_CHECK(train.steps > 0, "train.steps must be positive, got ", train.steps);
  AMBER_CHECK(train.micro_batch_tokens > 0, "train.micro_batch_tokens must be positive");
  AMBER_CHECK(train.grad_accum > 0, "train.grad_accum must be positive, got ", train.grad_accum);
  AMBER_CHECK(train.compute_dtype == "f32" || train.compute_dtype == "bf16" || train.compute_dtype == "f16",
              "train.compute_dtype '", train.compute_dtype, "' is not one of: f32, bf16, f16");
  AMBER_CHECK(train.grad_clip >= 0 && std::isfinite(train.grad_clip), "train.grad_clip must be a finite number >= 0 ",
              "(0 = off), got ", train.grad_clip);
  AMBER_CHECK(train.log_every > 0, "train.log_every must be positive");
  AMBER_CHECK(train.zero == 0 || train.zero == 1, "train.zero must be 0 (every process keeps the whole optimizer ",
              "state) or 1 (ZeRO-1: each keeps its shard), got ", train.zero);
  AMBER_CHECK(train.comm_timeout_s > 0 && std::isfinite(train.comm_timeout_s),
              "train.comm_timeout_s must be a positive number of seconds, got ", train.comm_timeout_s);
  AMBER_CHECK(train.eval_every >= 0 && train.checkpoint_every >= 0 && train.sample_every >= 0,
              "train.eval_every, checkpoint_every and sample_every must be >= 0 (0 = off / at the end)");
  AMBER_CHECK(train.keep_checkpoints > 0, "train.keep_checkpoints must be positive");
  AMBER_CHECK(train.sample_tokens > 0 || train.sample_every == 0, "train.sample_tokens must be positive, got ",
              train.sample_tokens, " (or set train.sample_every = 0 for no previews)");
  AMBER_CHECK(train.peak_tflops >= 0 && std::isfinite(train.peak_tflops),
              "train.peak_tflops must be a finite number >= 0 (0 = unknown), got ", train.peak_tflops);
  // Each would stop the run only at its first update or preview, or train on NaN.
  const auto rate = [](const char* key, double value, bool zero_allowed) {
    AMBER_CHECK(std::isfinite(value) && (value > 0 || (zero_allowed && value == 0)), "optimizer.", key,
                " must be a finite number ", zero_allowed ? ">= 0" : "> 0", ", got ", value);
  };
  rate("lr", optimizer.lr, false);
  rate("embed_lr", optimizer.embed_lr, true);
  rate("muon_lr", optimizer.muon_lr, false);
  rate("weight_decay", optimizer.weight_decay, true);
  rate("eps", optimizer.eps, false);
  rate("rms_target", optimizer.rms_target, false);
  for (const auto& [key, value] : {std::pair{"beta1", optimizer.beta1}, std::pair{"beta2", optimizer.beta2},
                                   std::pair{"muon_momentum", optimizer.muon_momentum}})
    AMBER_CHECK(value >= 0 && value < 1, "optimizer.", key, " must be in [0, 1), got ", value);
  AMBER_CHECK(data.max_seq_len > 0 && data.max_seq_len <= train.micro_batch_tokens, "data.max_seq_len (",
              data.max_seq_len, ") must be positive and at most train.micro_batch_tokens (", train.micro_batch_tokens, ")");
  AMBER_CHECK(optimizer.name == "adamw" || optimizer.name == "muon", "optimizer.name '", optimizer.name,
              "' is not one of: adamw, muon");
  make_schedule(schedule, train.steps);  // validates the schedule
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return bind_run_config(read_config_file(path, overrides), path);
}

RunConfig run_config_from_toml(const std::string& text, const std::string& origin) {
  return bind_run_config(parse_toml_text(text, origin), origin);
}

std::string run_config_to_toml(const RunConfig& config) {
  RunConfig c = config;
  toml::table root;
  root.insert("model", dump_section([&](auto&& fn) { c.model.fields(fn); }));
  root.insert("train", dump_section([&](auto&& fn) { c.train.fields(fn); }));
  root.insert("optimizer", dump_section([&](auto&& fn) { c.optimizer.fields(fn); }));
  root.insert("schedule", dump_section([&](auto&& fn) { c.schedule.fields(fn); }));
  root.insert("data", dump_section([&](auto&& fn) { c.data.fields(fn); }));
  return toml_to_string(root);
}

}  // namespace amber
