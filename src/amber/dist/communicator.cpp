// The world of one, and the choice of a backend from the launcher and the device.
#include "amber/dist/communicator.h"

#include "amber/core/error.h"
#include "amber/dist/collective_checks.h"
#include "amber/dist/mpi/mpi_communicator.h"
#include "amber/dist/nccl/nccl_communicator.h"

namespace amber::dist {
namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string backend() const override { return "single"; }

  void all_reduce_sum(Tensor& tensor) override { check_operand("all_reduce_sum", tensor); }
  void all_reduce_sum_start(Tensor& tensor) override { check_operand("all_reduce_sum_start", tensor); }
  void all_reduce_sum_wait() override {}
  void reduce_scatter_sum(const Tensor& input, Tensor& output, std::span<const int64_t> counts) override {
    check_blocks("reduce_scatter_sum", input, output, counts, 0, 1);
    if (input.raw() != output.raw()) output.copy_from(input);
  }
  void all_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts) override {
    check_blocks("all_gather", output, input, counts, 0, 1);
    if (input.raw() != output.raw()) output.copy_from(input);
  }
  void broadcast(Tensor& tensor, int root) override {
    check_operand("broadcast", tensor);
    AMBER_CHECK(root == 0, "broadcast: root ", root, " outside a world of one rank");
  }
  void all_to_all(const Tensor& input, Tensor& output) override {
    check_operand("all_to_all", input);
    check_operand("all_to_all", output);
    if (input.raw() != output.raw()) output.copy_from(input);
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> single_process_communicator() { return std::make_unique<SingleProcess>(); }

std::unique_ptr<Communicator> connect_communicator(const LaunchEnv& env, Device device,
                                                   const CommunicatorOptions& options) {
  // A launcher's world of one still gets its backend, so that its cost can be measured
  // against a single process's; but Slurm sets its variables in every batch script, so
  // its single task runs alone.
  const bool alone = env.launcher == LaunchEnv::Launcher::slurm && !env.distributed();
  if (env.launcher == LaunchEnv::Launcher::none || alone) return single_process_communicator();
  if (device.is_cuda()) {
    AMBER_CHECK(nccl_available(), "this process was started as rank ", env.rank, " of ", env.world_size, " by ",
                env.launcher_name(), " on ", device, ", but this amber was built without NCCL; build it where the "
                "CUDA toolkit's NCCL is installed, or train on train.device = \"cpu\"");
    return nccl_communicator(env, device.index, options.timeout_s);
  }
  AMBER_CHECK(env.launcher != LaunchEnv::Launcher::torchrun, "rank ", env.rank, " of ", env.world_size,
              " was started with torchrun-style variables (RANK, WORLD_SIZE), which CPU processes cannot connect "
              "through; start them with mpirun -np ", env.world_size, " or amber launch --via mpirun");
  AMBER_CHECK(mpi_available(), "this process was started as rank ", env.rank, " of ", env.world_size, " by ",
              env.launcher_name(),
              ", but this amber was built without MPI; install Open MPI (scripts/setup installs openmpi-bin "
              "and libopenmpi-dev) and build again");
  return mpi_communicator(options.timeout_s);
}

}  // namespace amber::dist
