// What an accepted registration brings, mapped: the segment and the tenant region, checked
// against the daemon and the reply, in a new Attachment (client_mapping.cpp). Called on the
// attach path only.
#pragma once

#include "hook/link/client_state.h"
#include "protocol/socket_protocol.h"

namespace cuslice::client::internal {

// Maps what the accepted registration brought (`fds`: the tenant region and the segment,
// closed here) into a new Attachment: the segment, checked to be made by the daemon at the
// other end of `s`, and the tenant region. Null on failure, with `s` closed.
Attachment* map_attachment(int s, const wire::RegisterReply& reply, const int (&fds)[2]);

}  // namespace cuslice::client::internal
