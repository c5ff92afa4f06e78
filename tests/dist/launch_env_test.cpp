#include <gtest/gtest.h>

#include <map>
#include <string>

#include "amber/core/error.h"
#include "amber/dist/communicator.h"
#include "amber/dist/launch_env.h"

namespace amber::dist {
namespace {

LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return detect_launch_env([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NoVariablesIsOneProcess) {
  const LaunchEnv env = detect({});
  EXPECT_EQ(env.launcher, LaunchEnv::Launcher::none);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_FALSE(env.distributed());
}

TEST(LaunchEnv, MpirunVariablesWinOverSlurmOnes) {
  const LaunchEnv env = detect({{"OMPI_COMM_WORLD_RANK", "2"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                {"SLURM_PROCID", "0"},
                                {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(env.launcher, LaunchEnv::Launcher::mpi);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 0);
}

TEST(LaunchEnv, TorchrunVariablesCarryTheRendezvous) {
  const LaunchEnv env = detect({{"RANK", "1"},
                                {"WORLD_SIZE", "2"},
                                {"LOCAL_RANK", "1"},
                                {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.launcher, LaunchEnv::Launcher::torchrun);
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, MalformedOrInconsistentVariablesNameTheVariable) {
  try {
    detect({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='one'"), std::string::npos) << e.what();
  }
  try {
    detect({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_PROCID=3 is not below SLURM_NTASKS=2"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(detect({{"RANK", "0"}}), Error);
}

TEST(SingleProcessCommunicator, CollectivesLeaveOneRanksData) {
  const auto comm = single_process_communicator();
  EXPECT_EQ(comm->world_size(), 1);
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  comm->all_reduce_sum(t);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{1, 2, 3}));
  Tensor out = Tensor::zeros({3}, DType::f32);
  const int64_t counts[] = {3};
  comm->reduce_scatter_sum(t, out, counts);
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{1, 2, 3}));
  const int64_t wrong[] = {2};
  EXPECT_THROW(comm->all_gather(t, out, wrong), Error);
}

TEST(SingleProcessCommunicator, ConnectingWithoutALauncherOrAsSlurmsOnlyTaskGivesAWorldOfOne) {
  EXPECT_EQ(connect_communicator(LaunchEnv{}, Device::cpu(), {})->backend(), "single");
  // Every Slurm batch script has SLURM_PROCID and SLURM_NTASKS set.
  const LaunchEnv batch = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(connect_communicator(batch, Device::cpu(), {})->backend(), "single");
}

}  // namespace
}  // namespace amber::dist
