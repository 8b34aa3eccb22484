#include "cli/scheduler_socket.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "cli/error.h"
#include "cli/runtime_dir.h"
#include "protocol/control_socket.h"

namespace cuslice::cli {

namespace {

std::optional<std::string> control_choice(const std::optional<std::string>& flag) {
  if (flag) return flag;
  if (const char* env = std::getenv(wire::kControlSocketEnv); env != nullptr && env[0] != '\0') return env;
  return std::nullopt;
}

bool present(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
}

}  // namespace

SocketChoice socket_choice(const std::optional<std::string>& flag, const std::optional<std::string>& control_flag) {
  const std::optional<std::string> control = control_choice(control_flag);
  if (flag) return {{*flag}, true, std::nullopt, control};
  if (const char* env = std::getenv(wire::kSocketEnv); env != nullptr && env[0] != '\0')
    return {{env}, true, std::nullopt, control};
  SocketChoice choice{{wire::kDefaultSocketPath}, false, std::nullopt, control};
  if (::geteuid() != 0) {
    choice.private_dir = user_socket_dir();
    choice.candidates.push_back((*choice.private_dir / "cuslice.sock").string());
  }
  return choice;
}

bool SocketChoice::ready(size_t i, bool create) const {
  if (!private_dir || i + 1 != candidates.size()) return true;
  if (!create && !present(*private_dir)) return false;
  ensure_private_dir(*private_dir);
  // Its control socket's directory is as private, and checked as carefully: in /tmp anybody
  // could have made it first.
  if (!control_chosen) {
    const std::filesystem::path control_dir = std::filesystem::path(control(i)).parent_path();
    if (create || present(control_dir)) ensure_private_dir(control_dir);
  }
  return true;
}

std::string SocketChoice::control(size_t i) const {
  if (control_chosen) return *control_chosen;
  std::string path = wire::default_control_socket(candidates[i]);
  if (path.empty())
    throw Error(ExitCode::kUsage,
                fmt::format("{} has no directory beside which its control socket could be", candidates[i]),
                "pass --control-socket PATH, or a socket in a directory of its own");
  return path;
}

std::string normalise_socket_flag(std::string& path) {
  if (path.empty()) return "the socket path is empty; give a file path such as /tmp/cuslice.sock";
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return fmt::format("\"{}\" cannot be made absolute: {}", path, ec.message());
  path = absolute.lexically_normal().string();
  if (path.back() == '/') return fmt::format("\"{}\" is a directory; give the socket file's path", path);
  constexpr size_t kMax = sizeof(sockaddr_un::sun_path) - 1;
  if (path.size() > kMax)
    return fmt::format("\"{}\" is {} characters long; a Unix socket path has at most {}", path, path.size(), kMax);
  return {};
}

std::string SocketChoice::describe() const {
  std::string text;
  for (size_t i = 0; i < candidates.size(); ++i)
    text += (i == 0 ? "" : i + 1 == candidates.size() ? " or " : ", ") + candidates[i];
  return text;
}

std::optional<SchedulerConnection> SchedulerConnection::connect(const std::string& path, const char* denied_hint) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw Error(ExitCode::kUsage, fmt::format("socket path too long ({} bytes, at most {}): {}", path.size(),
                                              sizeof addr.sun_path - 1, path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ExitCode::kFailure, fmt::format("socket: {}", std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    // No socket file (nor its directory), or a file nobody listens on (a daemon that
    // crashed): nobody answers.
    if (err == ENOENT || err == ENOTDIR || err == ECONNREFUSED) return std::nullopt;
    throw Error(ExitCode::kFailure, fmt::format("cannot connect to the scheduler at {}: {}", path, std::strerror(err)),
                err != EACCES ? ""
                : denied_hint ? denied_hint
                              : "the socket or its directory does not let your user in: ask whoever runs that "
                                "scheduler, or pass --socket PATH to use one of your own");
  }
  return SchedulerConnection(fd);
}

SchedulerConnection::SchedulerConnection(SchedulerConnection&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

SchedulerConnection::~SchedulerConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void SchedulerConnection::send_and_wait(const wire::ControlRequest& request, int timeout_ms) {
  if (::send(fd_, &request, sizeof request, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof request))
    throw Error(ExitCode::kFailure, fmt::format("cannot send to the scheduler: {}", std::strerror(errno)));
  pollfd p{fd_, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) throw Error(ExitCode::kFailure, fmt::format("the scheduler did not answer within {} ms", timeout_ms));
}

wire::ControlReply SchedulerConnection::request(const wire::ControlRequest& request, int timeout_ms) {
  send_and_wait(request, timeout_ms);
  wire::ControlReply reply;
  const ssize_t n = ::recv(fd_, &reply, sizeof reply, 0);
  if (n == static_cast<ssize_t>(sizeof reply) && reply.magic == wire::kControlMagic) {
    reply.message[sizeof reply.message - 1] = '\0';
    reply.shm_name[sizeof reply.shm_name - 1] = '\0';
    reply.config_path[sizeof reply.config_path - 1] = '\0';
    return reply;
  }
  // A daemon from before control requests reads our first word as a bad registration and
  // hangs up; a newer one would answer in a size we do not know.
  throw Error(ExitCode::kFailure,
              n == 0 ? "the scheduler closed the connection without answering"
                     : "the scheduler's answer is not one this cuslice understands",
              "is cuslice-scheduler the same version as cuslice? (cuslice version)");
}

TenantWorkloads SchedulerConnection::workloads(int timeout_ms) {
  wire::ControlRequest request;
  request.command = wire::ControlCommand::kWorkloads;
  send_and_wait(request, timeout_ms);
  auto list = std::make_unique<wire::WorkloadList>();
  const ssize_t n = ::recv(fd_, list.get(), sizeof *list, 0);
  TenantWorkloads out;
  // Anything else (a ControlReply saying "unknown control command"): a daemon from before
  // the request, which has no workloads to tell.
  if (n != static_cast<ssize_t>(sizeof *list) || list->magic != wire::kControlMagic) return out;
  const auto text = [](const char* field, size_t size) { return std::string(field, strnlen(field, size)); };
  for (uint32_t i = 0; i < std::min<uint32_t>(list->count, shm::kMaxTenants); ++i) {
    const wire::TenantWorkload& t = list->tenants[i];
    out[text(t.tenant, sizeof t.tenant)] = {text(t.pod_namespace, sizeof t.pod_namespace),
                                           text(t.pod_name, sizeof t.pod_name),
                                           text(t.container_name, sizeof t.container_name)};
  }
  return out;
}

int SchedulerConnection::release_as_lease() {
  const int fd = fd_;
  fd_ = -1;
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) != 0)
    throw Error(ExitCode::kFailure, fmt::format("cannot keep the scheduler connection: {}", std::strerror(errno)));
  return fd;
}

std::optional<wire::ControlReply> ask_scheduler(const std::string& path, wire::ControlCommand command,
                                                int timeout_ms, const char* denied_hint) {
  std::optional<SchedulerConnection> connection = SchedulerConnection::connect(path, denied_hint);
  if (!connection) return std::nullopt;
  wire::ControlRequest request;
  request.command = command;
  return connection->request(request, timeout_ms);
}

std::optional<SchedulerConnection> connect_control(const std::string& path, std::string& why) {
  try {
    std::optional<SchedulerConnection> connection = SchedulerConnection::connect(path);
    if (!connection) why = fmt::format("no scheduler answers on {}", path);
    return connection;
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
}

}  // namespace cuslice::cli
