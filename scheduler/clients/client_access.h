// Who may do what on which of the daemon's sockets (socket_protocol.h, "Two sockets"): every
// decision of that kind in the clients component is made with these, so that the rules are
// read in one place. Hooks register on the tenant socket; reload, `cuslice run`'s tenants and
// the device plugin's requests are taken only on the control socket, and there only from
// root or the daemon's own user. Pure: no state, no I/O.
#pragma once

#include <sys/types.h>

#include <string>

namespace cuslice {

// Who may change the daemon (reload, add tenants, the device plugin's requests), on the
// control socket: root, or whoever runs the daemon (the user whose `cuslice run`
// auto-started it). On the tenant socket nobody may: control_socket_only() says why.
bool may_control(uid_t peer);

// The refusal of `what` asked on the tenant socket.
std::string control_socket_only(const std::string& what, const std::string& control_socket_path);

}  // namespace cuslice
