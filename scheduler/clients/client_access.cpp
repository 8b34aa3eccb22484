// client_access.h: the rules, with the daemon's own uid.
#include "scheduler/clients/client_access.h"

#include <unistd.h>

namespace cuslice {

bool may_control(uid_t peer) { return peer == 0 || peer == geteuid(); }

std::string control_socket_only(const std::string& what, const std::string& control_socket_path) {
  return what + " is accepted only on the scheduler's control socket (" + control_socket_path +
         "), not on the socket tenants share";
}

}  // namespace cuslice
