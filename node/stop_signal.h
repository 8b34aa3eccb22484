// How a Kubernetes node agent learns it should stop: SIGTERM (the kubelet stopping its pod) or
// SIGINT set one flag that its loops look at. SIGPIPE is ignored: a peer that closed its end
// of a socket is an error of that call, not the end of the agent.
//
// Process-wide: call once, from main, before any thread starts.
#pragma once

#include <atomic>

namespace cuslice::node {

// Installs the handlers; the flag they set.
std::atomic<bool>& stop_on_signals();

}  // namespace cuslice::node
