#include "process_visibility.h"

#include <unistd.h>

#include "client.h"
#include "driver.h"
#include "quota.h"
#include "scheduler_link.h"

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
