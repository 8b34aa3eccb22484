// The answers to `cuslice`'s control requests (describe, workloads, preemption, reload,
// ensure-tenant) and to the device plugin's requests (create, update, remove and list the
// tenants it makes for containers), with the rules of client_access.h on who may ask what
// where. The rules on what a plugin tenant may be are PluginTenants'; what follows a change
// of the tenant table is the daemon's (DaemonControl).
//
// Owns nothing: reads the tenant table, the registered processes and preemption's report,
// changes the table's configuration or plugin tenants, and answers on the client's socket.
// Never keeps or closes a connection itself: it says which the ClientServer should do.
#pragma once

#include <string>

#include "protocol/socket_protocol.h"
#include "scheduler/clients/daemon_control.h"
#include "scheduler/clients/refusal_log.h"
#include "scheduler/preemption/preemptor.h"
#include "scheduler/scheduling/usage_ledger.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

struct Requester {  // who asks, as the ClientServer knows them
  pid_t pid = 0;
  uid_t uid = 0;
  bool control = false;  // connected through the control socket
};

class ControlDesk {
 public:
  enum class After { kClose, kKeepAsLease };
  // answer_control()'s outcome: kKeepAsLease with the tenant the lease holds.
  struct Outcome {
    After after = After::kClose;
    std::string tenant;
  };

  ControlDesk(std::string control_socket_path, SharedSegment& segment, TenantTable& tenants,
              const ProcessTable& processes, UsageLedger& ledger, const Preemptor& preemptor, RefusalLog& refusals,
              DaemonControl& daemon);

  Outcome answer_control(int fd, const Requester& who, const wire::ControlRequest& request);
  void answer_plugin(int fd, const Requester& who, const wire::PluginRequest& request);

 private:
  void answer_workloads(int fd);  // kWorkloads: a reply of its own
  // Reload and ensure-tenant, for a requester allowed to change the daemon.
  Outcome change(const Requester& who, const wire::ControlRequest& request, wire::ControlReply& reply);

  std::string control_socket_path_;
  SharedSegment& segment_;
  TenantTable& tenants_;
  const ProcessTable& processes_;
  UsageLedger& ledger_;
  const Preemptor& preemptor_;
  RefusalLog& refusals_;
  DaemonControl& daemon_;
};

}  // namespace cuslice
