// Settings, read from the environment exactly once, when the hook first initialises
// (driver.cpp). Nothing else in the hook calls getenv.
//
//   CUSLICE_MEMORY_LIMIT   quota for every device ("4GiB", "4096MiB", "25%") or per CUDA
//                          device ordinal ("0:4GiB,1:25%"); unset means no quota at all.
//   CUSLICE_LOG_LEVEL      off | error (default) | warn | info | debug; stderr only.
//   CUSLICE_CONTEXT_BYTES  what a CUDA context is assumed to hold before it can be measured
//                          (default 600MiB: an idle H100 context measured 518 MiB).
//   CUSLICE_CONTEXT_HEADROOM  kept free of the quota for memory the driver takes without an
//                          allocation call, e.g. kernels' code loaded at their first launch:
//                          of a local limit by the process, of a tenant's quota once for the
//                          whole tenant (default 128MiB: cuBLAS's first GEMM took 64 MiB so
//                          on an H100).
//   CUSLICE_CONTEXT_WARMUP under a scheduler, how long after a process creates a context its
//                          tenant keeps CUSLICE_CONTEXT_HEADROOM more free for it (kernels
//                          loaded at first launches), unless it needs the room itself
//                          (default 30s; 0s: never).
//   CUSLICE_MAX_QUEUED     under a scheduler, the most GPU work (as time) a process may have
//                          queued before its launches wait: how long the token takes to
//                          change hands, beside one kernel (default 500us; us, ms or s).
//   CUSLICE_PREEMPT_QUEUED the same bound while a tenant of higher priority is registered:
//                          how long that tenant waits for this one's queued work when it
//                          takes the GPU (default 250us; never less than one kernel).
//   CUSLICE_PARK_QUEUED    how much GPU work a launching thread may queue ahead, held back on
//                          the GPU behind gates while its tenant waits for the token or the
//                          bounds above are full, before it waits itself (default 20ms; 0:
//                          launches wait on the CPU instead).
//   CUSLICE_MOVABLE_MEMORY 0: in a preemptible tenant, keep cuMemAlloc's memory as the driver
//                          makes it (suspended by the driver's checkpoint only); default 1.
#pragma once

#include <cstdint>

#include "config/size.h"

namespace cuslice {

inline constexpr int kMaxDevices = 64;

struct Settings {
  bool valid = true;        // false: a variable could not be read; CUDA init fails closed
  char error[256] = {};     // why, when !valid

  bool any_limit = false;   // some device has a quota
  bool has_limit[kMaxDevices] = {};
  SizeSpec limit[kMaxDevices];

  uint64_t context_bytes = 600ull << 20;
  uint64_t context_headroom = 128ull << 20;
  uint64_t context_warmup_ns = 30'000'000'000;
  uint64_t max_queued_ns = 500'000;
  uint64_t preempt_queued_ns = 250'000;
  uint64_t park_queued_ns = 20'000'000;
  // CUSLICE_MOVABLE_MEMORY=0: never back cuMemAlloc for the fast suspension (movable_memory.h),
  // e.g. for a process that shares cuMemAlloc memory by CUDA IPC.
  bool movable_memory = true;
};

// Parses the variables (getenv happens here only). Idempotent.
void load_settings();
const Settings& settings();

// Parses a CUSLICE_MEMORY_LIMIT value into `out`. Exposed for tests.
bool parse_memory_limit(const char* text, Settings& out);

}  // namespace cuslice
