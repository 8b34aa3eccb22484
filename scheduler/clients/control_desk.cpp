// ControlDesk (control_desk.h): `cuslice`'s control requests.
#include "scheduler/clients/control_desk.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <memory>

#include "scheduler/clients/client_access.h"
#include "scheduler/clients/replies.h"
#include "scheduler/tenants/ephemeral_tenants.h"
#include "scheduler/tenants/tenant_workloads.h"

namespace cuslice {

ControlDesk::ControlDesk(std::string control_socket_path, SharedSegment& segment, TenantTable& tenants,
                         const ProcessTable& processes, UsageLedger& ledger, const Preemptor& preemptor,
                         RefusalLog& refusals, DaemonControl& daemon)
    : control_socket_path_(std::move(control_socket_path)),
      segment_(segment),
      tenants_(tenants),
      processes_(processes),
      ledger_(ledger),
      preemptor_(preemptor),
      refusals_(refusals),
      daemon_(daemon) {}

ControlDesk::Outcome ControlDesk::answer_control(int fd, const Requester& who, const wire::ControlRequest& req) {
  const TenantSource& source = tenants_.source();
  wire::ControlReply reply;
  reply.daemon_pid = getpid();
  reply.flags = source.ephemeral ? shm::Segment::kEphemeral : 0;
  std::strncpy(reply.shm_name, segment_.name().c_str(), sizeof reply.shm_name - 1);
  std::strncpy(reply.config_path, source.config_path.c_str(), sizeof reply.config_path - 1);
  Outcome after;
  if (req.version != wire::kControlVersion || req.size != sizeof req) {
    reply.status = wire::ControlStatus::kVersionMismatch;
    fill_message(reply.message, {"control protocol version " + std::to_string(req.version) +
                                 " is not supported (daemon speaks " + std::to_string(wire::kControlVersion) + ")"});
  } else if (req.command == wire::ControlCommand::kDescribe) {
    // `cuslice status` describes, then reads the segment: give it the counters of now.
    ledger_.publish_usage();
    reply.status = wire::ControlStatus::kOk;
  } else if (req.command == wire::ControlCommand::kWorkloads) {
    answer_workloads(fd);
    return {};
  } else if (req.command == wire::ControlCommand::kPreemption) {
    reply.status = wire::ControlStatus::kOk;
    fill_message(reply.message, preemptor_.report());
  } else if (req.command != wire::ControlCommand::kReload && req.command != wire::ControlCommand::kEnsureTenant) {
    reply.status = wire::ControlStatus::kBadRequest;
    fill_message(reply.message, {"unknown control command"});
  } else if (req.command == wire::ControlCommand::kEnsureTenant && !source.ephemeral) {
    // Before the uid check: `cuslice run` asks every daemon, and learns here to leave a
    // daemon with a file alone.
    reply.status = wire::ControlStatus::kUnsupported;
    fill_message(reply.message, {"this scheduler runs from " + source.config_path +
                                 ": tenants are added there, not by `cuslice run`"});
  } else if (!who.control) {
    // Whoever asks: root in a container that was given the tenant socket is uid 0 here.
    reply.status = wire::ControlStatus::kForbidden;
    fill_message(reply.message,
                 {control_socket_only(req.command == wire::ControlCommand::kReload ? "reload" : "adding a tenant",
                                      control_socket_path_)});
    refusals_.log(who.uid, "refused a control request of pid " + std::to_string(who.pid) + " on the tenant socket");
  } else if (!may_control(who.uid)) {
    reply.status = wire::ControlStatus::kForbidden;
    fill_message(reply.message, {"uid " + std::to_string(who.uid) + " may not change this scheduler (only root and uid " +
                                 std::to_string(geteuid()) + ")"});
  } else {
    after = change(who, req, reply);
  }
  reply.tenants = static_cast<uint32_t>(tenants_.config().tenants.size());
  send_control_reply(fd, reply);
  return after;
}

ControlDesk::Outcome ControlDesk::change(const Requester& who, const wire::ControlRequest& req,
                                       wire::ControlReply& reply) {
  const TenantSource& source = tenants_.source();
  if (req.command == wire::ControlCommand::kReload) {
    const ReloadOutcome outcome = daemon_.reload();
    reply.status = outcome.ok        ? wire::ControlStatus::kOk
                   : source.ephemeral ? wire::ControlStatus::kUnsupported
                                      : wire::ControlStatus::kFailed;
    fill_message(reply.message,
                 outcome.ok ? std::vector<std::string>{"reloaded " + source.config_path} : outcome.errors);
    return {};
  }
  const EnsureOutcome outcome = ensure_tenant(tenants_.config(), req.tenant);
  if (outcome.added) daemon_.tenants_changed();
  reply.status = outcome.ok ? wire::ControlStatus::kOk : wire::ControlStatus::kFailed;
  fill_message(reply.message, {outcome.message});
  spdlog::log(outcome.ok ? spdlog::level::info : spdlog::level::warn, "pid {}: {}", who.pid, outcome.message);
  if (!outcome.ok) return {};
  return {After::kKeepAsLease, std::string(req.tenant.name, strnlen(req.tenant.name, sizeof req.tenant.name))};
}

void ControlDesk::answer_workloads(int fd) {
  auto list = std::make_unique<wire::WorkloadList>();
  for (const auto& [name, w] : tenant_workloads(processes_, segment_, tenants_.plugin_tenants())) {
    if (list->count == shm::kMaxTenants) break;
    if (w.pod_namespace.empty() && w.pod_name.empty() && w.container_name.empty()) continue;
    wire::TenantWorkload& out = list->tenants[list->count++];
    std::strncpy(out.tenant, name.c_str(), sizeof out.tenant - 1);
    std::strncpy(out.pod_namespace, w.pod_namespace.c_str(), sizeof out.pod_namespace - 1);
    std::strncpy(out.pod_name, w.pod_name.c_str(), sizeof out.pod_name - 1);
    std::strncpy(out.container_name, w.container_name.c_str(), sizeof out.container_name - 1);
  }
  send_whole(fd, list.get(), sizeof *list, "the workloads");
}

}  // namespace cuslice
