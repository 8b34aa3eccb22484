// Tenants side by side (docs/design/spatial.md): the segment's record of which GPUs run their
// tenants concurrently through the scheduler's MPS control daemon, and what each tenant's
// processes tell MPS when they join it. The daemon alone writes it; hooks read it at
// registration (before the driver's cuInit) and on the token's slow path. Appended to the
// segment in ABI 2.5; a reader finds it only where Segment::abi_minor >= 5. Its layout is
// checked in shm_protocol.h.
#pragma once

#include <atomic>
#include <cstdint>

#include "protocol/shm_limits.h"

namespace cuslice::shm {

// GpuState::holder's value while a GPU's spatial group holds its token: every tenant whose
// TenantSpatial::group_gpus has the GPU's bit may launch there.
inline constexpr uint32_t kSpatialGroup = UINT32_MAX - 1;

inline constexpr uint32_t kPathSize = 256;  // NUL-terminated

struct alignas(64) TenantSpatial {
  // Bit g: the tenant runs in GPU g's spatial group and launches while the group holds the
  // token. Stored (relaxed) by the daemon with the tenant's other parameters, and when one of
  // its processes says it is a client of an MPS server the application started itself.
  std::atomic<uint32_t> group_gpus;
  // What its processes that join the scheduler's MPS server set before cuInit: the active
  // thread percentage (1-100; 100 the whole card), MPS client priority (0 normal, 1 below
  // normal), and the pinned device memory limit per device in MiB (0: none). Written by the
  // daemon before the tenant entry is published, and at reloads (for processes started later).
  std::atomic<uint32_t> sm_percent;
  std::atomic<uint32_t> client_priority;
  std::atomic<uint32_t> memory_limit_mib;
  uint32_t reserved[12];
};

struct alignas(64) SpatialState {
  // Bit g: GPU g is spatial in the configuration.
  std::atomic<uint32_t> spatial_gpus;
  // The MPS control daemon the scheduler owns: kMpsOff (no spatial GPU), kMpsRunning,
  // kMpsStarting (being started, or started again after it ended), kMpsFailed (it cannot be
  // started: spatial tenants time-slice). Stored (release) by the daemon; read by hooks at
  // registration and by the CLI.
  std::atomic<uint32_t> mps_state;
  enum : uint32_t { kMpsOff = 0, kMpsRunning = 1, kMpsStarting = 2, kMpsFailed = 3 };
  // Times the control daemon was started. Monotonic.
  std::atomic<uint32_t> mps_starts;
  uint32_t reserved0[13];
  // CUDA_MPS_PIPE_DIRECTORY of the control daemon: written once, before the segment is
  // published; empty without spatial GPUs.
  char mps_pipe_directory[kPathSize];
  TenantSpatial tenants[kMaxTenants];
};

}  // namespace cuslice::shm
