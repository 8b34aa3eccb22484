// Sending the daemon's answers on a client's socket: whole messages, never blocking (a client
// that does not read loses its answer, not the daemon's time), with a registration's tenant
// region attached as a descriptor. What the answers say is decided by the callers.
#pragma once

#include <string>
#include <vector>

#include "protocol/socket_protocol.h"

namespace cuslice {

// With `region` >= 0, the reply carries the descriptors (SCM_RIGHTS) of the tenant region and,
// after it, of the segment (socket_protocol.h, RegisterReply).
void send_register_reply(int fd, wire::RegisterReply reply, const std::string& message, int region = -1,
                         int segment = -1);
void send_control_reply(int fd, const wire::ControlReply& reply);
// Any other fixed-size answer (PluginList, WorkloadList); `what` names it in the warning.
void send_whole(int fd, const void* data, size_t size, const char* what);

// Lines joined by '\n'; when they do not all fit, as many as fit and a last line "...".
void fill_message(char (&message)[sizeof wire::ControlReply::message], const std::vector<std::string>& lines);

}  // namespace cuslice
