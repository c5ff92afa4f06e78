// ZeRO-1: an optimizer whose state lives sharded across the data-parallel ranks. Each
// rank updates the parameters its StoreShard owns (AdamW's moments and Muon's momentum
// exist for those only, and Muon orthogonalises each matrix on its owner alone), then
// the ranks all-gather the updated weights. The gradients it reads are the owned
// ranges that StoreShard::reduce_scatter_gradients summed.
//
// Where the working copies are buffers of their own (bf16 compute), the f32 master
// weights are sharded too (ParamStore::keep_master_ranges, done by the caller before
// building it) and the ranks all-gather the working copies alone; where the masters are
// the working weights (f32 compute), every rank keeps them whole. Checkpoints gather
// the state (and sharded masters) into whole tensors under whole-model names, and a
// load keeps each rank's part.
#pragma once

#include <memory>

#include "amber/dist/communicator.h"
#include "amber/dist/zero_shard.h"
#include "amber/train/optimizer.h"

namespace amber {

// `shard` and `comm` must outlive the optimizer.
std::unique_ptr<Optimizer> build_sharded_optimizer(const OptimizerConfig& config, ParamStore& store,
                                                   const dist::StoreShard& shard, dist::Communicator& comm);

}  // namespace amber
