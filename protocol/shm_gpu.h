// One GPU's record in the segment (protocol/shm_protocol.h): the token every launch reads,
// and what the daemon publishes about the card. The daemon alone writes it; its layout is
// checked in shm_protocol.h.
#pragma once

#include <atomic>
#include <cstdint>

#include "protocol/shm_limits.h"

namespace cuslice::shm {

// One GPU's token. Sits alone in a cache line: every launch of every process reads it.
struct alignas(64) GpuState {
  // Tenant index allowed to launch on this GPU, or kNoTenant (nobody: the previous holder's
  // queued work is draining, or nobody wants the GPU).
  // Written by: the daemon (store, release), always followed by a grant_seq increment.
  // Read by: hooks on every launch, load(acquire). A holder whose tenant is no longer stored
  // here waits before its next launch; work it queued before stays queued (the daemon drains
  // it before granting the next tenant, unless that tenant outranks it: see "Priority
  // takeover" in shm_protocol.h, and the lower-priority hook keeps such work short,
  // CUSLICE_PREEMPT_QUEUED).
  std::atomic<uint32_t> holder;

  // Futex word: incremented (fetch_add, release) by the daemon after every store to
  // `holder`, then FUTEX_WAKE for all. A hook that waits loads grant_seq (acquire) BEFORE it
  // loads `holder`, and sleeps with FUTEX_WAIT(grant_seq, the value it loaded): if the daemon
  // changed the holder after the hook's check, the increment makes the kernel refuse the
  // sleep (EAGAIN), so no wake-up is ever lost. Wraps around freely.
  std::atomic<uint32_t> grant_seq;

  // Bit t: some process of tenant t is blocked waiting for this GPU (its waiting count in a
  // process record is not zero). Stored (seq_cst) by the daemon at every scheduling step,
  // computed from the process records it just read. Read by the holder's hooks when they go
  // idle, to decide whether the daemon must be told now (a "kick") or can learn it later,
  // and whether a lower-priority tenant waits. A waiter's kick always makes the daemon step
  // after the waiter published its count, so a bit is missing only until that step.
  std::atomic<uint64_t> waiting_tenants;

  // Number of times the token changed hands; statistics for the CLI, written by the daemon.
  std::atomic<uint64_t> handoffs;

  // The card's total memory in bytes, 0 while unknown. Stored (relaxed) by the daemon, once:
  // NVML's figure at start; where NVML does not say, the first tenant region whose hooks
  // reported one (TenantGpuUse::memory_total). Read by the CLI and the metrics, to show a
  // quota given as a share of the card in bytes. A hook's report only changes what is shown:
  // the daemon decides with its own figure, and each hook resolves its tenant's quota against
  // the total its own driver reports.
  std::atomic<uint64_t> memory_total;
  // The card's UUID: CUuuid's bytes 0-7 and 8-15, each memcpy'd into one word (so the words
  // hold them in the machine's byte order); both words 0 while unknown. Stored (relaxed) by
  // the daemon, once, like memory_total; read by the metrics for the `gpu` label. A reader
  // may see one word set and not the other only while the daemon stores them.
  std::atomic<uint64_t> uuid[2];
  // GPU processes that no registered process accounts for (no hook: a static binary,
  // LD_PRELOAD removed) and the memory the driver says they hold, as the daemon's usage
  // watchdog last found them (NVML, about once a second). Stored (relaxed) by the daemon;
  // read by the CLI and the metrics.
  std::atomic<uint32_t> unhooked_processes;
  uint32_t reserved0;
  std::atomic<uint64_t> unhooked_bytes;
};

}  // namespace cuslice::shm
