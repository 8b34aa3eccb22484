// The device plugin's requests on the daemon's control socket (socket_protocol.h,
// PluginRequest): create, update, remove and list the tenants it makes for containers. The
// rules on what a plugin tenant may be and who may join it are PluginTenants'
// (plugin_tenants.h); this file checks who asks, with the rules of clients.cpp, applies the
// outcome to the tenant table and answers.
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "daemon.h"

namespace cuslice {
namespace {

wire::ControlReply reply_with(wire::ControlStatus status, const std::string& message) {
  wire::ControlReply reply;
  reply.status = status;
  reply.daemon_pid = getpid();
  std::strncpy(reply.message, message.c_str(), sizeof reply.message - 1);
  return reply;
}

template <typename Reply>
void send_whole(int fd, const Reply& reply) {
  if (send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof reply))
    spdlog::warn("could not send a reply to the device plugin: {}", std::strerror(errno));
}

}  // namespace

void Daemon::answer_plugin(int fd, Client& client, const wire::PluginRequest& req) {
  wire::ControlReply reply;
  if (req.version != wire::kPluginVersion || req.size != sizeof req) {
    reply = reply_with(wire::ControlStatus::kVersionMismatch,
                       "plugin protocol version " + std::to_string(req.version) + " is not supported (daemon speaks " +
                           std::to_string(wire::kPluginVersion) + ")");
  } else if (!client.control) {
    // Tenants' containers are given the tenant socket, and one that runs as root without a
    // user namespace is uid 0 there: it must not list credentials or make tenants.
    reply = reply_with(wire::ControlStatus::kForbidden, control_socket_only("managing plugin tenants"));
    log_refusal(client.uid, "refused a plugin request of pid " + std::to_string(client.pid) + " on the tenant socket");
  } else if (!may_control(client.uid)) {
    // Tenants decide who gets which memory: the rule of every other control request.
    reply = reply_with(wire::ControlStatus::kForbidden, "uid " + std::to_string(client.uid) +
                                                            " may not manage plugin tenants (only root and uid " +
                                                            std::to_string(geteuid()) + ")");
  } else if (req.command == wire::PluginCommand::kList) {
    auto list = std::make_unique<wire::PluginList>();
    list->status = wire::ControlStatus::kOk;
    const std::vector<wire::PluginTenant> tenants = plugin_tenants_.list();
    list->count = static_cast<uint32_t>(std::min<size_t>(tenants.size(), shm::kMaxTenants));
    std::copy_n(tenants.begin(), list->count, list->tenants);
    send_whole(fd, *list);
    drop_client(fd);
    return;
  } else if (req.command == wire::PluginCommand::kApply || req.command == wire::PluginCommand::kRemove) {
    const PluginOutcome outcome = req.command == wire::PluginCommand::kApply
                                      ? plugin_tenants_.apply(req.tenant, config_)
                                      : plugin_tenants_.remove(std::string(req.tenant.name,
                                                                           strnlen(req.tenant.name, sizeof req.tenant.name)));
    if (outcome.changed) {
      apply_config(config_);
      schedule();
    }
    if (outcome.changed || !outcome.ok)
      spdlog::log(outcome.ok ? spdlog::level::info : spdlog::level::warn, "device plugin (pid {}): {}", client.pid,
                  outcome.message);
    reply = reply_with(outcome.ok ? wire::ControlStatus::kOk : wire::ControlStatus::kFailed, outcome.message);
  } else {
    reply = reply_with(wire::ControlStatus::kBadRequest, "unknown plugin command");
  }
  std::strncpy(reply.shm_name, segment_.name().c_str(), sizeof reply.shm_name - 1);
  send_whole(fd, reply);
  drop_client(fd);
}

}  // namespace cuslice
