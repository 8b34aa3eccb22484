// Decoding what a client sends over the scheduler's socket, as pure functions: bytes in, a
// checked message or a refusal out, no I/O, no daemon state. The daemon calls them on every
// message; tests and the fuzz target call them on any bytes at all.
//
// The socket is open to every local user, so every field is untrusted: sizes and versions
// must match exactly, every string must be NUL-terminated inside its field and made of the
// characters its kind allows (so that it can go into a log line, JSON or a metric label as it
// is), and declared byte counts must be plausible. What cannot be decided from the bytes
// alone (whether a tenant exists, whether the peer may reload) is left to the daemon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "protocol/socket_protocol.h"

namespace cuslice {

// More than any GPU holds by orders of magnitude, small enough that the sum over every slot
// and GPU cannot wrap a 64-bit counter (1024 slots x 16 GPUs x 2^48 = 2^62).
inline constexpr uint64_t kMaxDeclaredChargeBytes = uint64_t{1} << 48;

// A connection's first message.
struct FirstMessage {
  enum class Kind {
    kRegister,        // `reg` is valid: right size and version, tenant name empty or well-formed
    kControl,         // `control` is valid: right size and version, a known command
    kPlugin,          // `plugin` is valid: right size and version, a known command, terminated strings
    kRefuseRegister,  // answer with a RegisterReply of `register_status` and `why`, then close
    kRefuseControl,   // answer with a ControlReply of `control_status` and `why`, then close
                      // (plugin requests are answered by ControlReply too)
    kDrop,            // not a message of this protocol: close without an answer
  };
  Kind kind = Kind::kDrop;
  wire::RegisterRequest reg;
  wire::ControlRequest control;
  wire::PluginRequest plugin;
  wire::RegisterStatus register_status = wire::RegisterStatus::kBadRequest;
  wire::ControlStatus control_status = wire::ControlStatus::kBadRequest;
  std::string why;  // for the reply and the log: printable, one line
};

// `n` is what recv() returned for a buffer at least one byte larger than either request, so
// that a longer message shows as n > sizeof (SOCK_SEQPACKET cuts it to the buffer).
FirstMessage decode_first_message(const void* bytes, size_t n);

// A registered hook's later messages: kicks (any short message), once the workload, memory
// requests (memory preemption) and claims of what the checkpoint cannot move.
struct HookMessage {
  enum class Kind { kKick, kWorkload, kMemory, kClaim, kDrop };
  Kind kind = Kind::kDrop;
  uint32_t claim = 0;                                   // kClaim: shm::kUses* bits, others cleared
  std::string pod_namespace, pod_name, container_name;  // kWorkload: Kubernetes names or empty
  wire::MemoryRequest memory;                           // kMemory: right size and version
  std::string why;                                      // kDrop
};

// Kicks are at most kMaxKickBytes long; anything longer that is not a well-formed
// WorkloadMessage is malformed, and the daemon closes the connection (kDrop).
inline constexpr size_t kMaxKickBytes = 8;
HookMessage decode_hook_message(const void* bytes, size_t n);

// A Kubernetes object name as the API server allows it (DNS label or subdomain: lower-case
// letters, digits, '-' and '.'), at most `max` characters; empty is allowed (unknown).
bool valid_kubernetes_name(std::string_view name, size_t max);

}  // namespace cuslice
