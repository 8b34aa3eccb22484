// Settings of the simulated device, from the environment. Read when the driver state is built
// (first call into the fake) and again by fake_cuda_reset(); never on a hot path.
//
//   FAKE_CUDA_DEVICE_COUNT   devices, 1..kMaxDevices               default 1
//   FAKE_CUDA_DEVICE_MEMORY  bytes of memory per device            default 16 GiB
//   FAKE_CUDA_CONTEXT_BYTES  device memory each live context holds default 512 MiB
//   FAKE_CUDA_MODULE_BYTES   device memory the process's first launch adds to its context
//                            (lazy module loading)                 default 0
//   FAKE_CUDA_KERNEL_US      microseconds a kernel occupies its device, for functions whose
//                            name is not spin_<N>us                default 0
//   FAKE_CUDA_SHARED_DEVICE  name of a POSIX shared-memory object (/dev/shm/<name>) holding the
//                            devices' timeline, shared by every process that names it; unset:
//                            the timeline is the process's own   default unset
//   FAKE_CUDA_COPY_MS_PER_GIB  milliseconds a copy between host and device memory takes per GiB
//                            (device_memory.h)                       default 0
//   FAKE_CUDA_FAULT_ON_UNMAPPED  non-zero: a kernel launch while a VMM range of the process was
//                            unmapped and not mapped again fails with CUDA_ERROR_ILLEGAL_ADDRESS
//                            and poisons its context (device_memory.h)  default 0
//
// The checkpoint API (checkpoint.cpp), read by the process that calls it:
//   FAKE_CUDA_CHECKPOINT_MS_PER_GIB  how long a checkpoint or a restore takes per GiB it moves
//                            (plus the wait for the process's submitted work)  default 0
//   FAKE_CUDA_CHECKPOINT_REFUSE  what a checkpoint refuses with CUDA_ERROR_NOT_SUPPORTED, as
//                            the driver documents: a comma list of `managed` (a process with
//                            cuMemAllocManaged memory) and `ipc` (memory exported or imported
//                            by CUDA IPC), or `none`                  default managed,ipc
//   FAKE_CUDA_CHECKPOINT_FAIL  operations that fail (CUDA_ERROR_OPERATING_SYSTEM), leaving
//                            the state as it was: a comma list of lock, checkpoint, restore,
//                            unlock; checkpoint-fatal and restore-fatal fail leaving the
//                            process FAILED                            default none
//   FAKE_CUDA_CHECKPOINT_REFUSE may also hold `failed`: a refused checkpoint then leaves the
//                            process FAILED instead of LOCKED (the driver documents that it
//                            "does not attempt to keep the process in a good state" after
//                            such an error)
//
// Read by the process itself:
//   FAKE_CUDA_HIDDEN_BLOCKERS  what the process holds that a checkpoint refuses, from its first
//                            driver call and without any allocation an interposer sees (a
//                            library that maps it by itself): a comma list of `managed`,
//                            `ipc`                                      default none
//
// Not knobs: an MPS client's CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// CUDA_MPS_CLIENT_PRIORITY and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT are read by cuInit, as the real
// driver reads them (mps_client.h; README.md, "MPS").
//
// A number that is not plain decimal (or a device count out of range) keeps the default; an
// unknown word in a list is ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fake_cuda {

inline constexpr int kMaxDevices = 16;

struct Knobs {
  int device_count = 1;
  std::size_t device_memory = std::size_t{16} << 30;
  std::size_t context_bytes = std::size_t{512} << 20;
  std::size_t module_bytes = 0;
  std::uint64_t kernel_us = 0;
  std::string shared_device;  // empty: a timeline private to the process
  std::uint64_t copy_ms_per_gib = 0;
  bool fault_on_unmapped = false;

  // The checkpoint API.
  std::uint64_t checkpoint_ms_per_gib = 0;
  bool checkpoint_refuses_managed = true;
  bool checkpoint_refuses_ipc = true;
  bool checkpoint_refusal_fails = false;  // a refused target is left FAILED, not LOCKED
  enum Failure : unsigned {
    kFailLock = 1u << 0,
    kFailCheckpoint = 1u << 1,
    kFailRestore = 1u << 2,
    kFailUnlock = 1u << 3,
    kFailCheckpointFatal = 1u << 4,
    kFailRestoreFatal = 1u << 5,
  };
  unsigned checkpoint_failures = 0;

  // The process's own: what it holds, unseen, that a checkpoint refuses.
  bool hidden_managed = false;
  bool hidden_ipc = false;
};

Knobs read_knobs_from_environment();

}  // namespace fake_cuda
