// Batch: one packed micro-batch as the trainer consumes it. Documents sit end to end;
// targets are next tokens within a document, -100 where there is none.
#pragma once

#include <cstdint>

#include "amber/core/seq_info.h"
#include "amber/core/tensor.h"

namespace amber::data {

inline constexpr int32_t kNoTarget = -100;

struct Batch {
  Tensor tokens;               // int32 [T]
  Tensor targets;              // int32 [T]; the last token of every document is kNoTarget
  SeqInfo seq;                 // document boundaries and per-document positions
  int64_t trained_tokens = 0;  // targets that are not kNoTarget
};

}  // namespace amber::data
