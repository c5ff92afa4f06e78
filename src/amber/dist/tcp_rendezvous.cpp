#include "amber/dist/tcp_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "amber/core/error.h"

namespace amber::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Closes a socket when it goes out of scope.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

std::string where(const LaunchEnv& env) { return concat(env.master_addr, ":", env.master_port); }

void send_all(int fd, const void* data, size_t size, const LaunchEnv& env) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    AMBER_CHECK(n > 0, "rendezvous at ", where(env), ": sending to a rank failed: ", std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void receive_all(int fd, void* data, size_t size, const LaunchEnv& env) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = recv(fd, p, size, 0);
    AMBER_CHECK(n > 0, "rendezvous at ", where(env), ": rank 0 closed the connection early (",
                n == 0 ? "end of stream" : std::strerror(errno), ")");
    p += n;
    size -= static_cast<size_t>(n);
  }
}

int remaining_ms(Clock::time_point deadline) {
  return static_cast<int>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
}

void serve(const LaunchEnv& env, const std::vector<uint8_t>& bytes, Clock::time_point deadline) {
  const Socket listener(socket(AF_INET6, SOCK_STREAM, 0));
  AMBER_CHECK(listener.fd() >= 0, "rendezvous: cannot open a socket: ", std::strerror(errno));
  const int yes = 1, no = 0;
  setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  setsockopt(listener.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));  // IPv4 peers too
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_any;
  address.sin6_port = htons(static_cast<uint16_t>(env.master_port));
  AMBER_CHECK(bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  listen(listener.fd(), env.world_size) == 0,
              "rendezvous: rank 0 cannot listen on port ", env.master_port, ": ", std::strerror(errno),
              "; set MASTER_PORT to a free port");
  const uint32_t size = static_cast<uint32_t>(bytes.size());
  for (int served = 1; served < env.world_size; ++served) {
    pollfd ready{listener.fd(), POLLIN, 0};
    AMBER_CHECK(poll(&ready, 1, remaining_ms(deadline)) == 1, "rendezvous: rank 0 heard from ", served - 1, " of ",
                env.world_size - 1, " ranks at port ", env.master_port,
                " before the timeout; check that every rank started and reaches MASTER_ADDR=", env.master_addr);
    const Socket peer(accept(listener.fd(), nullptr, nullptr));
    AMBER_CHECK(peer.fd() >= 0, "rendezvous: accepting a rank failed: ", std::strerror(errno));
    send_all(peer.fd(), &size, sizeof(size), env);
    send_all(peer.fd(), bytes.data(), bytes.size(), env);
  }
}

std::vector<uint8_t> fetch(const LaunchEnv& env, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &found);
  AMBER_CHECK(resolved == 0, "rendezvous: cannot resolve MASTER_ADDR=", env.master_addr, ": ",
              gai_strerror(resolved));
  std::string last_error = "no address";
  while (true) {
    for (addrinfo* a = found; a; a = a->ai_next) {
      const Socket s(socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (s.fd() < 0 || connect(s.fd(), a->ai_addr, a->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        continue;
      }
      freeaddrinfo(found);
      uint32_t size = 0;
      receive_all(s.fd(), &size, sizeof(size), env);
      std::vector<uint8_t> bytes(size);
      receive_all(s.fd(), bytes.data(), bytes.size(), env);
      return bytes;
    }
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  freeaddrinfo(found);
  fail("rendezvous: rank ", env.rank, " could not reach rank 0 at ", where(env), " (", last_error,
       ") before the timeout; check MASTER_ADDR and MASTER_PORT and that rank 0 started");
}

}  // namespace

std::vector<uint8_t> rendezvous_broadcast(const LaunchEnv& env, const std::vector<uint8_t>& bytes, double timeout_s) {
  AMBER_CHECK(env.master_port > 0 && env.master_port < 65536 && !env.master_addr.empty(),
              "rendezvous: MASTER_ADDR and MASTER_PORT must name rank 0's host and a free port (got '",
              env.master_addr, "' and ", env.master_port, ")");
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  if (env.rank != 0) return fetch(env, deadline);
  serve(env, bytes, deadline);
  return bytes;
}

}  // namespace amber::dist
