// What a hostile local user can do to the scheduler through its socket, one subcommand per
// attack; the attack tests (test_socket_attacks.py) run it as an unprivileged user and then
// check that the scheduler and the other tenants are unaffected. It speaks the protocol by
// hand (socket_protocol.h), not through hook/link/client.h, so that it can say what no hook
// says.
//
//   attacker register SOCKET TENANT CHARGED one registration declaring CHARGED bytes on GPU 0;
//                                           prints the reply's status and message
//   attacker hold SOCKET TENANT N           N registrations kept open; prints "ok K refused R"
//                                           once all are answered, then waits for stdin to close
//   attacker requests SOCKET TENANT N K     N registrations, each sending K memory requests (1 MiB
//                                           on GPU 0, the card said full); prints "sent R" with
//                                           the requests sent, then waits for stdin to close
//   attacker connections SOCKET N           N connections that send nothing; prints how many
//                                           the scheduler closed within 10 s
//   attacker oversized SOCKET               a registration, then a 64 KiB message; prints
//                                           "closed" when the scheduler hung up on it
//   attacker control SOCKET describe|reload|ensure NAME
//                                           one control request (ensure: tenant NAME, 1 GiB);
//                                           prints "status S MESSAGE" (S: ControlStatus)
//   attacker plugin SOCKET list|apply NAME KEY|remove NAME
//                                           one device plugin request (apply: 1 GiB on GPU 0,
//                                           50%); prints "status S MESSAGE", or for a list
//                                           answered "listed N NAME:KEY..."
// control and plugin print "unreachable REASON" when they cannot connect: what the
// control socket's permissions are for. Messages are printed on one line.
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
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/socket_protocol.h"

namespace {

using namespace cuslice;

// -1 with errno when nobody can be reached at `path`.
int connect_to(const char* path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (s >= 0) close(s);
    errno = err;
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

int memory_requests(const char* socket_path, const char* tenant, int n, int k) {
  std::vector<int> kept;
  int sent = 0;
  for (int i = 0; i < n; ++i) {
    const int s = connect_to(socket_path);
    wire::RegisterReply reply;
    if (s < 0 || !registered(s, tenant, 0, reply)) {
      if (s >= 0) close(s);
      continue;
    }
    kept.push_back(s);
    for (int r = 1; r <= k; ++r) {
      wire::MemoryRequest req;
      req.sequence = static_cast<uint32_t>(r);
      req.bytes = uint64_t{1} << 20;
      if (send(s, &req, sizeof req, MSG_NOSIGNAL) == sizeof req) ++sent;
    }
  }
  std::printf("sent %d\n", sent);
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

// The message, on one line.
std::string one_line(const char* text, size_t size) {
  std::string line(text, strnlen(text, size));
  while (!line.empty() && line.back() == '\n') line.pop_back();
  for (char& c : line)
    if (c == '\n') c = ' ';
  return line;
}

// Sends `request`, prints what comes back as described at the top. Always 0: the request
// was made, whatever the answer.
template <typename Request>
int ask(const char* socket_path, const Request& request) {
  const int s = connect_to(socket_path);
  if (s < 0) {
    std::printf("unreachable %s\n", std::strerror(errno));
    return 0;
  }
  auto list = std::make_unique<wire::PluginList>();  // the largest answer
  pollfd p{s, POLLIN, 0};
  ssize_t n = -1;
  if (send(s, &request, sizeof request, MSG_NOSIGNAL) == sizeof request && poll(&p, 1, 5000) == 1)
    n = recv(s, list.get(), sizeof *list, 0);
  close(s);
  if (n == sizeof(wire::PluginList) && list->magic == wire::kPluginMagic && list->status == wire::ControlStatus::kOk) {
    std::printf("listed %u", list->count);
    for (uint32_t i = 0; i < list->count && i < shm::kMaxTenants; ++i)
      std::printf(" %s:%s", list->tenants[i].name, list->tenants[i].key);
    std::printf("\n");
  } else if (n == sizeof(wire::ControlReply)) {
    wire::ControlReply reply;
    std::memcpy(&reply, list.get(), sizeof reply);
    std::printf("status %d %s\n", static_cast<int>(reply.status), one_line(reply.message, sizeof reply.message).c_str());
  } else {
    std::printf("no answer (%zd bytes)\n", n);
  }
  return 0;
}

int control(const char* socket_path, const std::string& command, const char* name) {
  wire::ControlRequest request;
  if (command == "describe") {
    request.command = wire::ControlCommand::kDescribe;
  } else if (command == "reload") {
    request.command = wire::ControlCommand::kReload;
  } else if (command == "ensure" && name != nullptr) {
    request.command = wire::ControlCommand::kEnsureTenant;
    std::strncpy(request.tenant.name, name, sizeof request.tenant.name - 1);
    request.tenant.memory_bytes = 1ull << 30;
  } else {
    return 2;
  }
  return ask(socket_path, request);
}

int plugin(const char* socket_path, const std::string& command, const char* name, const char* key) {
  wire::PluginRequest request;
  if (command == "list") {
    request.command = wire::PluginCommand::kList;
  } else if (command == "apply" && name != nullptr && key != nullptr) {
    request.command = wire::PluginCommand::kApply;
    std::strncpy(request.tenant.name, name, sizeof request.tenant.name - 1);
    std::strncpy(request.tenant.key, key, sizeof request.tenant.key - 1);
    request.tenant.memory_bytes = 1ull << 30;
    request.tenant.share_ppm = 500'000;
    request.tenant.units[0] = 1;
  } else if (command == "remove" && name != nullptr) {
    request.command = wire::PluginCommand::kRemove;
    std::strncpy(request.tenant.name, name, sizeof request.tenant.name - 1);
  } else {
    return 2;
  }
  return ask(socket_path, request);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "register" && argc == 5) return register_once(argv[2], argv[3], std::strtoull(argv[4], nullptr, 0));
  if (cmd == "hold" && argc == 5) return hold(argv[2], argv[3], std::atoi(argv[4]));
  if (cmd == "requests" && argc == 6)
    return memory_requests(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]));
  if (cmd == "connections" && argc == 4) return silent_connections(argv[2], std::atoi(argv[3]));
  if (cmd == "oversized" && argc == 4) return oversized(argv[2], argv[3]);
  if (cmd == "control" && (argc == 4 || argc == 5)) {
    if (const int rc = control(argv[2], argv[3], argc == 5 ? argv[4] : nullptr); rc != 2) return rc;
  }
  if (cmd == "plugin" && argc >= 4 && argc <= 6) {
    if (const int rc = plugin(argv[2], argv[3], argc >= 5 ? argv[4] : nullptr, argc == 6 ? argv[5] : nullptr); rc != 2)
      return rc;
  }
  std::fprintf(stderr, "usage: see the top of tests/scheduler/clients/socket_attacker.cpp\n");
  return 2;
}
