#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "amber/core/error.h"
#include "amber/dist/tcp_rendezvous.h"
#include "dist/testing.h"

namespace amber::dist {
namespace {

using testing::free_port;

LaunchEnv env(int rank, int world, int port) {
  LaunchEnv e;
  e.launcher = LaunchEnv::Launcher::torchrun;
  e.rank = rank;
  e.world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

// The other ranks start first, so they must retry until rank 0 listens.
TEST(TcpRendezvous, EveryRankGetsRankZerosBytes) {
  const int port = free_port();
  const std::vector<uint8_t> id = {7, 0, 255, 3, 9};
  std::vector<std::future<std::vector<uint8_t>>> others;
  for (int r = 1; r < 4; ++r)
    others.push_back(std::async(std::launch::async, [=] { return rendezvous_broadcast(env(r, 4, port), {}, 10); }));
  EXPECT_EQ(rendezvous_broadcast(env(0, 4, port), id, 10), id);
  for (auto& f : others) EXPECT_EQ(f.get(), id);
}

TEST(TcpRendezvous, NoRankZeroIsAnErrorNamingTheAddress) {
  try {
    rendezvous_broadcast(env(1, 2, free_port()), {}, 0.3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0 at 127.0.0.1:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace amber::dist
