// ZeRO-1: an optimizer whose state lives sharded across the data-parallel ranks. Each
// rank updates the parameters its StoreShard owns (AdamW's moments and Muon's momentum
// exist for those only, and Muon orthogonalises each matrix on its owner alone), then
// the ranks all-gather the updated weights. The gradients it reads are the owned
// ranges that StoreShard::reduce_scatter_gradients summed.
//
// On the CPU the master weights are the working weights (f32 compute), so every rank
// keeps them whole and only the optimizer state is sharded; checkpoints gather the
// state into whole tensors under whole-model names, and a load keeps each rank's part.
#pragma once

#include <memory>

#include "amber/dist/communicator.h"
#include "amber/dist/zero_shard.h"
#include "amber/train/optimizer.h"

namespace amber {

// `shard` and `comm` must outlive the optimizer.
std::unique_ptr<Optimizer> build_sharded_optimizer(const OptimizerConfig& config, const ParamStore& store,
                                                   const dist::StoreShard& shard, dist::Communicator& comm);

}  // namespace amber
