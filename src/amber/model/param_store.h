// ParamStore: every parameter of a model in a few flat buffers, one per role, each with
// its master values, gradients and working copies; a Param is a view into them. Zeroing
// gradients is one pass per buffer, an optimizer walks flat ranges, and a data-parallel
// bucket or an optimizer shard is a slice of a buffer.
//
// Modules declare their parameters while the model is built (add, add_stacked); the
// buffers exist once allocate() has run, and then every declared Param points into them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "amber/model/param.h"

namespace amber {

// Parameters that one product reads together (q, k and v projections): each part is a
// parameter of its own (own name, optimizer state, checkpoint entry) whose value, grad
// and work are consecutive dim-0 slices of `whole`'s, so a single GEMM can read or
// write all of them. `whole` has no name and is not listed among the parameters.
struct StackedParams {
  std::shared_ptr<Param> whole;
  std::vector<std::shared_ptr<Param>> parts;
};

class ParamStore {
 public:
  // One role's parameters, laid out one after another in declaration order, each
  // starting on a multiple of kAlignment elements; the gaps hold zeros.
  struct Buffer {
    ParamRole role = ParamRole::embedding;
    Tensor value, grad, work;  // 1-D; work shares value's storage when compute == master
    std::vector<Param*> params;  // named parameters in this buffer, by offset
    // value holds the buffer's elements from value_begin on: all of them, or under
    // sharded masters (keep_master_ranges) one range.
    int64_t value_begin = 0;
    // While whole masters are open: the kept range and where it begins (value is whole).
    Tensor kept;
    int64_t kept_begin = 0;

    // The master values of the buffer's elements [begin, end), which value must hold.
    Tensor master_slice(int64_t begin, int64_t end) const;
  };
  struct Range {
    int64_t begin = 0, end = 0;
  };
  static constexpr int64_t kAlignment = 128;

  explicit ParamStore(const Placement& placement);
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  const Placement& placement() const { return placement_; }

  // Declares a parameter. Muon applies to hidden and expert matrices.
  std::shared_ptr<Param> add(std::string name, Shape shape, ParamRole role, ParamInit init);
  // Declares the parts of one stacked parameter: part i has shape [rows[i], trailing...]
  // and its own name; all share role and init.
  StackedParams add_stacked(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                            const Shape& trailing, ParamRole role, ParamInit init);

  // Creates the buffers and points every declared parameter into them: values zero
  // except those initialised to ones (norm gains), gradients zero, working copies equal.
  void allocate();
  bool allocated() const { return allocated_; }

  // The named parameters in declaration order (the model's order: initialisation
  // streams, checkpoints and optimizer state follow it).
  const std::vector<std::shared_ptr<Param>>& params() const { return params_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }

  // Re-derives the working copies from the master values: one pass per buffer (over the
  // kept range only, under sharded masters).
  void refresh_working_copies();

  // ZeRO-1 where the working copies are buffers of their own (a compute dtype other
  // than the masters'): keeps the master values of ranges[b] of each buffer b only; the
  // other ranks update the rest, which reaches this one through the working copies. A
  // parameter (or stack) outside its buffer's range then has no value (an undefined
  // tensor), while its gradient and working copy stay whole.
  void keep_master_ranges(const std::vector<Range>& ranges);
  bool masters_sharded() const { return masters_sharded_; }
  bool whole_masters_open() const { return whole_masters_open_; }
  // Whole master buffers again, for checkpoints to write or read: every value is a view
  // into them, the kept ranges copied in and the rest zero (for the caller to fill).
  void open_whole_masters();
  // Back to the kept ranges, first copied from the whole buffers when `loaded` (they
  // were written). A no-op unless whole masters are open.
  void close_whole_masters(bool loaded);

 private:
  struct Entry {  // one allocation: a parameter, or a stack's whole
    std::shared_ptr<Param> param;
    Shape shape;
    std::vector<std::shared_ptr<Param>> parts;  // a stack's named parts, in order
    std::vector<int64_t> rows;                  // and their dim-0 sizes
  };
  std::shared_ptr<Param> declare(std::string name, ParamRole role, ParamInit init);
  // Points every parameter's value (stacks' wholes included) into its buffer's value.
  void bind_values();

  Placement placement_;
  std::vector<Entry> entries_;
  std::vector<std::shared_ptr<Param>> params_;
  std::vector<Buffer> buffers_;
  bool allocated_ = false;
  bool masters_sharded_ = false;
  bool whole_masters_open_ = false;
};

}  // namespace amber
