// The backward's reports of final gradients (GradientReady): one per part of the model
// that has parameters, in the order the backward finishes them (the head, the final
// norm, the blocks from the last, the embedding), each index the first parameter of the
// part, and every parameter from there on already holding the gradient the backward ends
// with.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "amber/data/batch.h"
#include "amber/model/language_model.h"
#include "amber/ops/step_slots.h"
#include "tiny_model.h"

namespace amber {
namespace {

class RecordingReady final : public GradientReady {
 public:
  explicit RecordingReady(const LanguageModel& model) : model_(model) {}
  std::vector<size_t> reports;
  std::vector<std::vector<std::vector<double>>> seen;  // per report, the gradients from `first` on

  void gradients_final(size_t first) override {
    reports.push_back(first);
    std::vector<std::vector<double>> grads;
    for (size_t i = first; i < model_.params().size(); ++i) grads.push_back(model_.params()[i]->grad.to_doubles());
    seen.push_back(grads);
  }

 private:
  const LanguageModel& model_;
};

// The index of the first parameter whose name starts with `prefix`.
size_t first_named(const LanguageModel& model, const std::string& prefix) {
  for (size_t i = 0; i < model.params().size(); ++i)
    if (model.params()[i]->name.starts_with(prefix)) return i;
  ADD_FAILURE() << "no parameter named " << prefix << "...";
  return 0;
}

void expect_reports_in_backward_order(const ModelConfig& c) {
  LanguageModel model(c);
  model.init_weights(3);
  std::vector<std::vector<int32_t>> docs = {{1, 5, 9, 2, 7}, {3, 3, 8, 1}, {4, 6, 2, 9, 9, 1}};
  const data::Batch b = data::pack_documents(docs);
  Tensor sums = Tensor::zeros({step_slot::objective_end - step_slot::objective_begin}, DType::f64);
  const Tensor scale = Tensor::full({1}, 0.1, DType::f64);
  RecordingReady ready(model);
  model.zero_grad();
  model.forward_backward(b.tokens, b.targets, b.seq, scale, sums);  // an earlier micro-batch: no reports
  model.forward_backward(b.tokens, b.targets, b.seq, scale, sums, &ready);
  std::vector<size_t> want;
  if (!c.tie_embeddings) want.push_back(first_named(model, "lm_head."));
  want.push_back(first_named(model, "norm."));
  for (int i = c.depth - 1; i >= 0; --i) want.push_back(first_named(model, "layers." + std::to_string(i) + "."));
  want.push_back(0);
  EXPECT_EQ(ready.reports, want);
  for (size_t r = 0; r < ready.reports.size(); ++r)
    for (size_t i = ready.reports[r]; i < model.params().size(); ++i)
      EXPECT_EQ(ready.seen[r][i - ready.reports[r]], model.params()[i]->grad.to_doubles())
          << model.params()[i]->name << " reported final before its last write";
}

TEST(GradientReady, BackwardReportsEachPartOnceInReverseDeclarationOrder) {
  ModelConfig c = testing::tiny_model();
  c.depth = 3;
  expect_reports_in_backward_order(c);
  c.tie_embeddings = true;
  c.recompute = "block";
  expect_reports_in_backward_order(c);
}

}  // namespace
}  // namespace amber
