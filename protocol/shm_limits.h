// The shared memory's sizes and the bit flags its records share (protocol/shm_protocol.h):
// how many tenants, processes and GPUs a segment holds, and what a process's per-GPU and
// checkpoint words mean. Numbers only: no record, no layout.
#pragma once

#include <cstdint>

namespace cuslice::shm {

inline constexpr uint32_t kMaxTenants = 64;
inline constexpr uint32_t kMaxProcesses = 1024;
inline constexpr uint32_t kMaxGpus = 16;
inline constexpr uint32_t kNameSize = 64;  // NUL-terminated

inline constexpr uint32_t kNoTenant = UINT32_MAX;
// A process's per-GPU flags (ProcessUse::gpu_flags, published in ProcessSlot::gpu_flags).
// Bits 0-15 count the process's threads blocked waiting for the token (added and subtracted
// by the waiting thread; a launch held back on the GPU while the process waits counts as one,
// see client.h token_try); bit kBusy says the process has work queued or running on the GPU
// (set when it holds the token and launches, cleared when its hook saw the work drain; never
// set by waiting). The daemon reads them at every step: a tenant has demand for a GPU when
// one of its processes waits or is busy; a revoked holder has drained when none of its
// processes is busy, whether or not they also wait.
inline constexpr uint32_t kWaitersMask = 0xFFFF;
inline constexpr uint32_t kBusy = 1u << 16;

// What the driver's checkpoint cannot move that a process says it uses
// (ProcessUse::checkpoint_flags): no checkpoint is tried on it (memory preemption).
inline constexpr uint32_t kUsesIpc = 1u << 0;      // CUDA IPC memory, exported or imported
inline constexpr uint32_t kUsesManaged = 1u << 1;  // managed memory
inline constexpr uint32_t kUsesMps = 1u << 2;      // an MPS client

}  // namespace cuslice::shm
