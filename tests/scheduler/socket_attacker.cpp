// What a hostile local user can do to the scheduler through its socket, one subcommand per
// attack; the attack tests (test_socket_attacks.py) run it as an unprivileged user and then
// check that the scheduler and the other tenants are unaffected. It speaks the protocol by
// hand (socket_protocol.h), not through protocol/client.h, so that it can say what no hook
// says.
//
//   attacker register SOCKET TENANT CHARGED one registration declaring CHARGED bytes on GPU 0;
//                                           prints the reply's status and message
//   attacker hold SOCKET TENANT N           N registrations kept open; prints "ok K refused R"
//                                           once all are answered, then waits for stdin to close
//   attacker connections SOCKET N           N connections that send nothing; prints how many
//                                           the scheduler closed within 10 s
//   attacker oversized SOCKET               a registration, then a 64 KiB message; prints
//                                           "closed" when the scheduler hung up on it
//
// Exit status: 0 when the attack ran (whatever the scheduler did), 2 on bad arguments, 1 when
// the attack could not even be tried (no socket).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "socket_protocol.h"

namespace {

using namespace cuslice;

int connect_to(const char* path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (s >= 0) close(s);
    return -1;
  }
  return s;
}

// True when the peer closed `s` within `ms`.
bool closed_within(int s, int ms) {
  pollfd p{s, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return false;
  char byte;
  return recv(s, &byte, 1, MSG_DONTWAIT) == 0 || (p.revents & (POLLHUP | POLLERR));
}

bool registered(int s, const char* tenant, uint64_t charged, wire::RegisterReply& reply) {
  wire::RegisterRequest req;
  std::strncpy(req.tenant, tenant, sizeof req.tenant - 1);
  req.charged[0] = charged;
  if (send(s, &req, sizeof req, MSG_NOSIGNAL) != sizeof req) return false;
  pollfd p{s, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1 || recv(s, &reply, sizeof reply, 0) != sizeof reply) return false;
  reply.message[sizeof reply.message - 1] = '\0';
  return reply.status == wire::RegisterStatus::kOk;
}

int register_once(const char* socket_path, const char* tenant, uint64_t charged) {
  const int s = connect_to(socket_path);
  if (s < 0) return 1;
  wire::RegisterReply reply;
  const bool ok = registered(s, tenant, charged, reply);
  std::printf("%s %d %s\n", ok ? "ok" : "refused", static_cast<int>(reply.status), reply.message);
  close(s);
  return 0;
}

int hold(const char* socket_path, const char* tenant, int n) {
  std::vector<int> kept;
  int refused = 0;
  for (int i = 0; i < n; ++i) {
    const int s = connect_to(socket_path);
    wire::RegisterReply reply;
    if (s >= 0 && registered(s, tenant, 0, reply)) {
      kept.push_back(s);
    } else {
      ++refused;
      if (s >= 0) close(s);
    }
  }
  std::printf("ok %zu refused %d\n", kept.size(), refused);
  std::fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof buf) > 0) {
  }
  for (int s : kept) close(s);
  return 0;
}

int silent_connections(const char* socket_path, int n) {
  std::vector<int> open;
  for (int i = 0; i < n; ++i)
    if (const int s = connect_to(socket_path); s >= 0) open.push_back(s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t closed = 0;
  std::vector<bool> seen(open.size(), false);
  while (closed < open.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < open.size(); ++i) {
      if (!seen[i] && closed_within(open[i], 0)) {
        seen[i] = true;
        ++closed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("opened %zu closed %zu\n", open.size(), closed);
  for (int s : open) close(s);
  return 0;
}

int oversized(const char* socket_path, const char* tenant) {
  const int s = connect_to(socket_path);
  if (s < 0) return 1;
  wire::RegisterReply reply;
  if (!registered(s, tenant, 0, reply)) {
    std::printf("not registered: %s\n", reply.message);
    return 0;
  }
  std::vector<char> junk(64 << 10, 'x');
  send(s, junk.data(), junk.size(), MSG_NOSIGNAL);
  std::puts(closed_within(s, 5000) ? "closed" : "open");
  close(s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "register" && argc == 5) return register_once(argv[2], argv[3], std::strtoull(argv[4], nullptr, 0));
  if (cmd == "hold" && argc == 5) return hold(argv[2], argv[3], std::atoi(argv[4]));
  if (cmd == "connections" && argc == 4) return silent_connections(argv[2], std::atoi(argv[3]));
  if (cmd == "oversized" && argc == 4) return oversized(argv[2], argv[3]);
  std::fprintf(stderr, "usage: see the top of tests/scheduler/socket_attacker.cpp\n");
  return 2;
}
