#include "hook/entry/process_visibility.h"

#include <unistd.h>

#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/quota.h"

namespace cuslice::process_visibility {

bool filtered() {
  if (cuda_ready()) return quota::active();
  return cuda_refused();
}

bool visible(unsigned int pid) {
  return pid == static_cast<unsigned int>(getpid()) ||
         (scheduler_link::enabled() && client::tenant_pid(static_cast<int>(pid)));
}

}  // namespace cuslice::process_visibility
