#include "amber/export/hf_weights.h"

#include <set>

#include "amber/export/hf_layout.h"

namespace amber {
namespace {

// rows [begin, end) of `t` (every row when both are 0), times `scale` plus `offset`, as f32.
Tensor rows_mapped(const Tensor& t, int64_t begin, int64_t end, double scale, double offset) {
  Tensor rows = (begin == 0 && end == 0 ? t : t.slice(0, begin, end)).to(Device::cpu()).to(DType::f32).contiguous();
  if (scale == 1.0 && offset == 0.0) return rows;
  Tensor out = rows.clone();
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<float>(static_cast<double>(p[i]) * scale + offset);
  return out;
}

// Expert `e` of a stacked [experts, ...] tensor as a view; the tensor itself for e < 0.
Tensor expert_of(const Tensor& t, int64_t e) {
  if (e < 0) return t;
  Shape rest;
  for (int d = 1; d < t.ndim(); ++d) rest.push_back(t.size(d));
  return t.slice(0, e, e + 1).view(rest);
}

// The amber tensor `s` reads: a parameter, or model state that is not trained.
Tensor amber_tensor(const LanguageModel& model, const HfTensorSource& s) {
  if (!s.buffer) return expert_of(model.param(s.amber_name).value, s.expert);
  for (const auto& [name, tensor] : model.buffers())
    if (name == s.amber_name) return tensor;
  fail("the model has no buffer '", s.amber_name, "'");
}

// Tensors a Hugging Face checkpoint may hold that carry no weights: old Llama files
// store RoPE's frequencies, which amber derives from the config.
bool derived_buffer(const std::string& name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<NamedTensor> hf_tensors(const LanguageModel& model, DType dtype) {
  AMBER_CHECK(dtype == DType::f32 || dtype == DType::bf16, "Hugging Face export writes f32 or bf16 weights, not ",
              dtype_name(dtype));
  std::vector<NamedTensor> out;
  for (const HfTensorSource& s : hf_tensor_map(model.config())) {
    const Tensor t = s.amber_name.empty()
                         ? Tensor::full({s.length}, s.offset, DType::f32)
                         : rows_mapped(amber_tensor(model, s), s.row_begin, s.row_end, s.scale, s.offset);
    out.push_back({s.hf_name, dtype == DType::f32 ? t : t.to(dtype)});
  }
  return out;
}

void load_hf_tensors(const std::map<std::string, Tensor>& tensors, LanguageModel& model, const std::string& origin) {
  const ModelConfig& c = model.config();
  std::set<std::string> used;
  for (const HfTensorSource& s : hf_tensor_map(c)) {
    const auto it = tensors.find(s.hf_name);
    AMBER_CHECK(it != tensors.end(), origin, ": tensor '", s.hf_name,
                "' is missing; the checkpoint was not made for the run's model config (compare its config.json "
                "with the [model] table)");
    used.insert(s.hf_name);
    const Tensor& t = it->second;
    AMBER_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, origin, ": tensor '",
                s.hf_name, "' has dtype ", dtype_name(t.dtype()), "; amber imports f32, bf16 or f16 weights");
    if (s.amber_name.empty()) {
      const std::vector<double> v = t.to_doubles();
      bool untrained = t.shape() == Shape{s.length};
      for (double x : v) untrained = untrained && x == s.offset;
      const bool balance_bias = s.hf_name.ends_with("e_score_correction_bias");
      AMBER_CHECK(untrained, origin, ": tensor '", s.hf_name,
                  balance_bias ? "' holds a balance bias, which the run's model.moe_bias_update_rate = 0 has no place "
                                 "for; set model.moe_bias_update_rate > 0"
                               : "' holds trained QK-norm gains, which the run's model.qk_norm_affine = false drops; "
                                 "set model.qk_norm_affine = true");
      continue;
    }
    const Tensor value = amber_tensor(model, s);
    Tensor target = s.row_begin == 0 && s.row_end == 0 ? value : value.slice(0, s.row_begin, s.row_end);
    AMBER_CHECK(t.shape() == target.shape(), origin, ": tensor '", s.hf_name, "' has shape ", t.shape(),
                " but the run's model config needs ", target.shape(),
                "; set the [model] table's dim, heads, kv_heads, head_dim, mlp_hidden and vocab_size to the "
                "checkpoint's config.json");
    target.copy_from(rows_mapped(t, 0, 0, 1.0 / s.scale, -s.offset / s.scale));
  }
  for (const auto& [name, tensor] : tensors)
    AMBER_CHECK(used.count(name) || derived_buffer(name) || (c.tie_embeddings && name == "lm_head.weight"), origin,
                ": tensor '", name,
                "' has no place in the run's model config (a bias, QK-norm or untied head the config lacks?); "
                "compare the checkpoint's config.json with the [model] table");
  model.refresh_working_copies();
}

}  // namespace amber
