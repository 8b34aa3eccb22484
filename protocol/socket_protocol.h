// Registration of a hooked process with cuslice-scheduler, over a Unix socket.
//
// The socket is SOCK_SEQPACKET, so every message arrives whole or not at all:
//   1. hook -> daemon: one RegisterRequest.
//   2. daemon -> hook: one RegisterReply. The daemon learns pid, uid and gid from the kernel
//      (SO_PEERCRED), never from the message.
//   3. From then on the hook sends only kicks (one byte, any value): "look at my GPUs now",
//      sent when it starts waiting for a token or goes idle while holding one. The daemon
//      sends nothing more.
// The connection is the process's lease: when the process exits or is killed the kernel
// closes it, and the daemon gives back the process's memory and token. When the daemon goes
// away the hook sees the connection end and runs ungated until it can register again.
//
// Messages are fixed-size PODs; `version` changes with any change to them, and a daemon
// answers a request of another version with kVersionMismatch (in the reply of the version
// the request asked for when it knows it, else its own).
#pragma once

#include <cstdint>
#include <type_traits>

#include "shm_protocol.h"

namespace cuslice::wire {

inline constexpr uint32_t kMagic = 0x43534C43;  // "CLSC"
inline constexpr uint16_t kVersion = 1;
inline constexpr const char* kDefaultSocketPath = "/run/cuslice/cuslice.sock";
inline constexpr const char* kSocketEnv = "CUSLICE_SOCKET";
inline constexpr const char* kTenantEnv = "CUSLICE_TENANT";

struct RegisterRequest {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t size = sizeof(RegisterRequest);
  // CUSLICE_TENANT, NUL-terminated; empty: let the daemon's match rules decide.
  char tenant[shm::kNameSize] = {};
  // Bytes this process already holds per GPU: non-zero when it registers again after the
  // daemon restarted, so the new daemon charges them to the tenant.
  uint64_t charged[shm::kMaxGpus] = {};
};

enum class RegisterStatus : int32_t {
  kOk = 0,
  kRefused = 1,          // no tenant for this process (message says why); do not retry
  kFull = 2,             // no free process slot; retry later
  kBadRequest = 3,       // malformed request
  kVersionMismatch = 4,  // message or segment version not supported
};

struct RegisterReply {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t size = sizeof(RegisterReply);
  RegisterStatus status = RegisterStatus::kBadRequest;
  uint32_t slot = 0;             // index into Segment::processes
  uint32_t tenant = 0;           // index into Segment::tenants
  uint32_t reserved0 = 0;
  uint64_t slot_generation = 0;  // ProcessSlot::generation at registration
  uint64_t segment_generation = 0;  // Segment::generation
  char shm_name[shm::kNameSize] = {};  // for shm_open, e.g. "/cuslice"
  char message[256] = {};        // human-readable reason when status != kOk
};

static_assert(std::is_trivially_copyable_v<RegisterRequest>);
static_assert(std::is_trivially_copyable_v<RegisterReply>);
static_assert(sizeof(RegisterRequest) == 8 + 64 + 8 * shm::kMaxGpus);
static_assert(sizeof(RegisterReply) == 8 + 16 + 16 + 64 + 256);

}  // namespace cuslice::wire
