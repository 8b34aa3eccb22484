// ControlDesk (control_desk.h): the device plugin's requests on the control socket
// (socket_protocol.h, PluginRequest): create, update, remove and list its tenants.
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "scheduler/clients/client_access.h"
#include "scheduler/clients/control_desk.h"
#include "scheduler/clients/replies.h"

namespace cuslice {
namespace {

wire::ControlReply reply_with(wire::ControlStatus status, const std::string& message) {
  wire::ControlReply reply;
  reply.status = status;
  reply.daemon_pid = getpid();
  std::strncpy(reply.message, message.c_str(), sizeof reply.message - 1);
  return reply;
}

constexpr const char* kToPlugin = "a reply to the device plugin";

}  // namespace

void ControlDesk::answer_plugin(int fd, const Requester& who, const wire::PluginRequest& req) {
  wire::ControlReply reply;
  PluginTenants& plugin = tenants_.plugin_tenants();
  if (req.version != wire::kPluginVersion || req.size != sizeof req) {
    reply = reply_with(wire::ControlStatus::kVersionMismatch,
                       "plugin protocol version " + std::to_string(req.version) + " is not supported (daemon speaks " +
                           std::to_string(wire::kPluginVersion) + ")");
  } else if (!who.control) {
    // Tenants' containers are given the tenant socket, and one that runs as root without a
    // user namespace is uid 0 there: it must not list credentials or make tenants.
    reply = reply_with(wire::ControlStatus::kForbidden,
                       control_socket_only("managing plugin tenants", control_socket_path_));
    refusals_.log(who.uid, "refused a plugin request of pid " + std::to_string(who.pid) + " on the tenant socket");
  } else if (!may_control(who.uid)) {
    // Tenants decide who gets which memory: the rule of every other control request.
    reply = reply_with(wire::ControlStatus::kForbidden, "uid " + std::to_string(who.uid) +
                                                            " may not manage plugin tenants (only root and uid " +
                                                            std::to_string(geteuid()) + ")");
  } else if (req.command == wire::PluginCommand::kList) {
    auto list = std::make_unique<wire::PluginList>();
    list->status = wire::ControlStatus::kOk;
    const std::vector<wire::PluginTenant> tenants = plugin.list();
    list->count = static_cast<uint32_t>(std::min<size_t>(tenants.size(), shm::kMaxTenants));
    std::copy_n(tenants.begin(), list->count, list->tenants);
    send_whole(fd, list.get(), sizeof *list, kToPlugin);
    return;
  } else if (req.command == wire::PluginCommand::kApply || req.command == wire::PluginCommand::kRemove) {
    const PluginOutcome outcome =
        req.command == wire::PluginCommand::kApply
            ? plugin.apply(req.tenant, tenants_.config())
            : plugin.remove(std::string(req.tenant.name, strnlen(req.tenant.name, sizeof req.tenant.name)));
    if (outcome.changed) daemon_.tenants_changed();
    if (outcome.changed || !outcome.ok)
      spdlog::log(outcome.ok ? spdlog::level::info : spdlog::level::warn, "device plugin (pid {}): {}", who.pid,
                  outcome.message);
    reply = reply_with(outcome.ok ? wire::ControlStatus::kOk : wire::ControlStatus::kFailed, outcome.message);
  } else {
    reply = reply_with(wire::ControlStatus::kBadRequest, "unknown plugin command");
  }
  std::strncpy(reply.shm_name, segment_.name().c_str(), sizeof reply.shm_name - 1);
  send_whole(fd, &reply, sizeof reply, kToPlugin);
}

}  // namespace cuslice
