// What the clients component asks of the daemon around it: a scheduling step after a kick,
// a reload, the tenant table applied after `cuslice run` or the device plugin changed it.
// Implemented by the daemon, which alone knows what follows each (the policies, preemption,
// the idle timer); the clients component never reaches those itself.
#pragma once

#include <string>

#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

class DaemonControl {
 public:
  // A scheduling step now.
  virtual void step() = 0;
  // The configuration file again, as on SIGHUP.
  virtual ReloadOutcome reload() = 0;
  // The tenant table's configuration or plugin tenants changed: apply them, then step.
  virtual void tenants_changed() = 0;
  // A retired tenant's entry was freed with its last process: the policies forget it.
  virtual void tenant_released() = 0;
  // A connection opened or closed (the idle timer).
  virtual void connections_changed() = 0;
  // The last `cuslice run` that ensured `tenant` ended: the tenant goes, if `run` added it.
  virtual void lease_ended(const std::string& tenant) = 0;
  // A process of tenant `tenant` is a client of an MPS server the application started itself
  // (it said so, and the scheduler did not send it to its own).
  virtual void foreign_mps(uint32_t tenant) = 0;

 protected:
  ~DaemonControl() = default;
};

}  // namespace cuslice
