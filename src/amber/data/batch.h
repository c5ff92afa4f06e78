// Batch: one packed micro-batch as the trainer consumes it. Documents sit end to end;
// targets are next tokens within a document, kNoTarget (core/targets.h) where there is none.
#pragma once

#include <cstdint>
#include <vector>

#include "amber/core/seq_info.h"
#include "amber/core/targets.h"
#include "amber/core/tensor.h"

namespace amber::data {

struct Batch {
  Tensor tokens;               // int32 [T]
  Tensor targets;              // int32 [T]; the last token of every document is kNoTarget
  SeqInfo seq;                 // document boundaries and per-document positions
  int64_t trained_tokens = 0;  // targets that are not kNoTarget
};

// Packs whole documents (each at least one token) into one batch: next-token
// targets inside each document, kNoTarget on its last token. Tests and benchmarks
// build batches with it; the loader packs its own chunks.
Batch pack_documents(const std::vector<std::vector<int32_t>>& documents);

}  // namespace amber::data
