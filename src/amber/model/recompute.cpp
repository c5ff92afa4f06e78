#include "amber/model/recompute.h"

#include "amber/core/error.h"

namespace amber {
namespace {

class KeepActivations final : public RecomputePolicy {
 public:
  ResidualStream forward(const Block& block, const ResidualStream& in, const SeqInfo& seq, Block::Saved& saved,
                         Arena& activations, Arena&) const override {
    return block.forward(in, seq, saved, activations, activations);
  }
  void backward(const Block& block, Tensor& dx, const SeqInfo& seq, Block::Saved& saved,
                Arena& scratch) const override {
    block.backward(dx, seq, saved, scratch);
    scratch.reset();
  }
  bool recomputes() const override { return false; }
};

class RecomputeBlock final : public RecomputePolicy {
 public:
  ResidualStream forward(const Block& block, const ResidualStream& in, const SeqInfo& seq, Block::Saved& saved,
                         Arena& activations, Arena& scratch) const override {
    // The output's add is done here: its terms live in scratch, which is reused next.
    const ResidualStream out = block.forward(in, seq, saved, scratch, activations).materialised();
    const Tensor input = saved.input;
    saved = Block::Saved{};  // drop views into scratch before it is reused
    saved.input = input;
    scratch.reset();
    return out;
  }
  void backward(const Block& block, Tensor& dx, const SeqInfo& seq, Block::Saved& saved,
                Arena& scratch) const override {
    Block::Saved replay;
    block.forward({saved.input}, seq, replay, scratch, scratch);
    block.backward(dx, seq, replay, scratch);
    replay = Block::Saved{};
    scratch.reset();
  }
  bool recomputes() const override { return true; }
};

}  // namespace

std::unique_ptr<RecomputePolicy> make_recompute_policy(const std::string& name) {
  if (name == "none") return std::make_unique<KeepActivations>();
  if (name == "block") return std::make_unique<RecomputeBlock>();
  fail("unknown recompute policy '", name, "'; valid: none, block");
}

}  // namespace amber
