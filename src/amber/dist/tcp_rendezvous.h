// The one exchange a torchrun-style launch needs before any communicator exists: rank 0
// hands a few bytes (NCCL's unique id) to every other rank over TCP, listening at
// MASTER_PORT while the others connect to MASTER_ADDR:MASTER_PORT.
#pragma once

#include <cstdint>
#include <vector>

#include "amber/dist/launch_env.h"

namespace amber::dist {

// On rank 0, sends `bytes` to every other rank and returns them; on the others, returns
// what rank 0 sent (their `bytes` are ignored). Connections are retried until
// timeout_s, since rank 0 may start listening after the others start connecting; an
// error names the address and what to check.
std::vector<uint8_t> rendezvous_broadcast(const LaunchEnv& env, const std::vector<uint8_t>& bytes, double timeout_s);

}  // namespace amber::dist
