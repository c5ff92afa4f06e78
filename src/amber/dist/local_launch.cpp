#include "amber/dist/local_launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "amber/core/error.h"
#include "amber/dist/mpi/mpi_communicator.h"

namespace amber::dist {
namespace {

volatile sig_atomic_t forwarded_signal = 0;

void remember_signal(int signal) { forwarded_signal = signal; }

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string dirs = path;
  for (size_t begin = 0; begin <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(begin, end - begin)) / program;
    if (access(candidate.c_str(), X_OK) == 0) return true;
    begin = end + 1;
  }
  return false;
}

std::vector<char*> argv_of(std::vector<std::string>& words) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  return argv;
}

// A port nothing listens on now, for rank 0's rendezvous (the kernel's choice of an
// ephemeral port; another program could take it before rank 0 does, which rank 0's
// bind would then report).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  AMBER_CHECK(fd >= 0, "amber launch: cannot open a socket to find a free port: ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  close(fd);
  AMBER_CHECK(ok, "amber launch: cannot find a free port on 127.0.0.1: ", std::strerror(errno));
  return ntohs(address.sin_port);
}

int exit_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string describe_status(int status) {
  return WIFEXITED(status) ? concat("exited with status ", WEXITSTATUS(status))
                           : concat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
}

[[noreturn]] void exec_mpirun(const LocalLaunch& launch) {
  std::vector<std::string> words = {"mpirun", "-np", std::to_string(launch.processes), launch.program};
  words.insert(words.end(), launch.args.begin(), launch.args.end());
  std::vector<char*> argv = argv_of(words);
  execvp("mpirun", argv.data());
  fail("amber launch: cannot run mpirun (", std::strerror(errno),
       "); install Open MPI (openmpi-bin) or start the ranks with --via env");
}

int run_with_env(const LocalLaunch& launch) {
  const int port = free_port();
  std::vector<pid_t> ranks(static_cast<size_t>(launch.processes), -1);
  for (int r = 0; r < launch.processes; ++r) {
    const pid_t pid = fork();
    AMBER_CHECK(pid >= 0, "amber launch: cannot start rank ", r, ": ", std::strerror(errno));
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(launch.processes).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(launch.processes).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<std::string> words = {launch.program};
      words.insert(words.end(), launch.args.begin(), launch.args.end());
      std::vector<char*> argv = argv_of(words);
      execv(launch.program.c_str(), argv.data());
      std::cerr << "amber: error: amber launch: cannot run " << launch.program << " as rank " << r << ": "
                << std::strerror(errno) << "\n";
      _exit(127);
    }
    ranks[static_cast<size_t>(r)] = pid;
  }
  // The launcher's own SIGINT or SIGTERM goes on to every rank, which then checkpoint and stop.
  signal(SIGINT, remember_signal);
  signal(SIGTERM, remember_signal);
  int running = launch.processes, result = 0;
  bool stopping = false, forwarded = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  const auto signal_all = [&](int signal) {
    for (pid_t pid : ranks)
      if (pid > 0) kill(pid, signal);
  };
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r] != pid) continue;
        ranks[r] = -1;
        --running;
        if (exit_status(status) != 0 && !stopping) {
          result = exit_status(status);
          std::cerr << "amber: error: amber launch: rank " << r << " of " << launch.processes << " "
                    << describe_status(status) << "; stopping the other ranks\n";
          stopping = true;
          stop_deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(launch.stop_grace_s));
          signal_all(SIGTERM);
        }
      }
      continue;
    }
    if (forwarded_signal && !forwarded) {
      forwarded = true;
      signal_all(forwarded_signal);
    }
    if (std::chrono::steady_clock::now() > stop_deadline) {
      signal_all(SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

}  // namespace

LaunchVia default_launch_via() { return mpi_available() && on_path("mpirun") ? LaunchVia::mpirun : LaunchVia::env; }

int launch_local(const LocalLaunch& launch) {
  AMBER_CHECK(launch.processes >= 1, "amber launch: -n must be at least 1, got ", launch.processes);
  AMBER_CHECK(!launch.args.empty(), "amber launch: nothing to run; give the command after --, e.g. ",
              "amber launch -n 2 -- train run.toml");
  if (launch.via == LaunchVia::mpirun) exec_mpirun(launch);
  return run_with_env(launch);
}

}  // namespace amber::dist
