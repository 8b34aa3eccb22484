#include "node/scheduler_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/segment_mapping.h"
#include "common/segment_snapshot.h"

namespace cuslice::node {
namespace {

// A connected SOCK_SEQPACKET socket, closed on scope exit; -1 with `why` when nobody answers.
class Connection {
 public:
  Connection(const std::string& path, std::string& why) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) {
      why = "socket path too long: " + path;
      return;
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return;
    why = fmt::format("no scheduler answers on {}: {}", path, std::strerror(errno));
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends `request`, receives one message of at most `size` bytes into `reply`; the length
  // received, or -1 with `why`.
  ssize_t exchange(const void* request, size_t request_size, void* reply, size_t size, int timeout_ms,
                   std::string& why) {
    if (::send(fd_, request, request_size, MSG_NOSIGNAL) != static_cast<ssize_t>(request_size)) {
      why = fmt::format("cannot send to the scheduler: {}", std::strerror(errno));
      return -1;
    }
    pollfd p{fd_, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&p, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
      why = fmt::format("the scheduler did not answer within {} ms", timeout_ms);
      return -1;
    }
    const ssize_t n = ::recv(fd_, reply, size, 0);
    if (n <= 0) why = "the scheduler closed the connection without answering (is it older than this plugin?)";
    return n > 0 ? n : -1;
  }

  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

std::string text(const char* field, size_t size) { return std::string(field, strnlen(field, size)); }

}  // namespace

SchedulerAnswer SchedulerClient::control(wire::PluginCommand command, const wire::PluginTenant& tenant) const {
  std::string why;
  Connection c(socket_path_, why);
  if (!c.ok()) return {SchedulerAnswer::Kind::kUnreachable, why};
  wire::PluginRequest request;
  request.command = command;
  request.tenant = tenant;
  auto reply = std::make_unique<wire::ControlReply>();
  const ssize_t n = c.exchange(&request, sizeof request, reply.get(), sizeof *reply, timeout_ms_, why);
  if (n < 0) return {SchedulerAnswer::Kind::kUnreachable, why};
  if (n != static_cast<ssize_t>(sizeof *reply) || reply->magic != wire::kControlMagic)
    return {SchedulerAnswer::Kind::kRefused, "the scheduler's answer is not one this plugin understands"};
  reply->message[sizeof reply->message - 1] = '\0';
  std::string message = reply->message;
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (reply->status == wire::ControlStatus::kOk) return {SchedulerAnswer::Kind::kOk, message};
  return {SchedulerAnswer::Kind::kRefused, message.empty() ? "refused" : message};
}

SchedulerAnswer SchedulerClient::apply(const wire::PluginTenant& tenant) const {
  return control(wire::PluginCommand::kApply, tenant);
}

SchedulerAnswer SchedulerClient::remove(const std::string& name) const {
  wire::PluginTenant tenant;
  std::strncpy(tenant.name, name.c_str(), sizeof tenant.name - 1);
  return control(wire::PluginCommand::kRemove, tenant);
}

std::optional<std::string> SchedulerClient::describe(SchedulerState& state, std::string& why) const {
  Connection c(socket_path_, why);
  if (!c.ok()) return std::nullopt;
  wire::ControlRequest describe;
  auto reply = std::make_unique<wire::ControlReply>();
  const ssize_t n = c.exchange(&describe, sizeof describe, reply.get(), sizeof *reply, timeout_ms_, why);
  if (n != static_cast<ssize_t>(sizeof *reply) || reply->magic != wire::kControlMagic) {
    if (n >= 0) why = "the scheduler's answer is not one this plugin understands";
    return std::nullopt;
  }
  state.pid = reply->daemon_pid;
  return text(reply->shm_name, sizeof reply->shm_name);
}

bool SchedulerClient::list_plugin_tenants(SchedulerState& state, std::string& why) const {
  Connection c(socket_path_, why);
  if (!c.ok()) return false;
  wire::PluginRequest request;
  request.command = wire::PluginCommand::kList;
  auto list = std::make_unique<wire::PluginList>();
  const ssize_t n = c.exchange(&request, sizeof request, list.get(), sizeof *list, timeout_ms_, why);
  if (n < 0) return false;
  if (n != static_cast<ssize_t>(sizeof *list) || list->magic != wire::kPluginMagic) {
    // A ControlReply: a scheduler that refuses (or does not know) plugin requests.
    why = "the scheduler does not list plugin tenants (is it older than this plugin, is this not its control "
          "socket, or does this plugin run as another user than root or the scheduler's?)";
    if (n == static_cast<ssize_t>(sizeof(wire::ControlReply))) {
      const auto* reply = reinterpret_cast<const wire::ControlReply*>(list.get());
      if (reply->magic == wire::kControlMagic) why = text(reply->message, sizeof reply->message);
    }
    return false;
  }
  if (list->status != wire::ControlStatus::kOk) {
    why = text(list->message, sizeof list->message);
    return false;
  }
  state.plugin_tenants.assign(list->tenants, list->tenants + std::min<uint32_t>(list->count, shm::kMaxTenants));
  return true;
}

bool SchedulerClient::read_other_tenants(SchedulerState& state, const std::string& shm_name, std::string& why) {
  std::set<std::string> ours;
  for (const wire::PluginTenant& t : state.plugin_tenants) ours.insert(text(t.name, sizeof t.name));
  const MappedSegment segment = map_segment(shm_name).segment;
  if (!segment) {
    why = "cannot read the scheduler's shared segment " + shm_name;
    return false;
  }
  const SegmentSnapshot snapshot = take_snapshot(*segment);
  state.generation = snapshot.generation;
  if (const shm::SpatialState* spatial = shm::spatial_state(*segment))
    state.spatial_gpus = spatial->spatial_gpus.load(std::memory_order_relaxed);
  for (const TenantSnapshot& t : snapshot.tenants) {
    if (ours.count(t.name)) continue;
    // The scheduler holds the file's tenants and the plugin's, 64 in all; a retired one (gone
    // from the file, its processes still running) is not among them.
    if (!t.retired) ++state.other_tenant_count;
    // A preemptible tenant's memory is given back when a tenant with a quota needs it
    // (docs/design/preemption.md): it guarantees nothing, so it keeps nothing back from the pods.
    if (t.preemptible) continue;
    state.other_tenants.push_back({t.name, t.memory_quota_bytes, t.memory_quota_ppm});
  }
  return true;
}

std::optional<SchedulerState> SchedulerClient::state(std::string& why) const {
  SchedulerState state;
  const std::optional<std::string> shm_name = describe(state, why);
  if (!shm_name || !list_plugin_tenants(state, why) || !read_other_tenants(state, *shm_name, why))
    return std::nullopt;
  return state;
}

}  // namespace cuslice::node
