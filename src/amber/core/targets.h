// The target id that marks a token without a next-token target (a document's last
// token, a batch's padding): the loader writes it, the loss skips it. Defined here,
// below data/ and ops/, so both read the one value.
#pragma once

#include <cstdint>

namespace amber {

inline constexpr int32_t kNoTarget = -100;  // PyTorch's cross_entropy ignore_index default

}  // namespace amber
