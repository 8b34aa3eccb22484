// When each simulated device is next free: the one timeline on which every kernel of every
// process that shares the device is placed, one kernel at a time, like a GPU time-sliced between
// contexts. The same object holds the table of the processes that use the devices, their memory
// and their checkpoint state (process_table.h).
//
// Where it lives
//   FAKE_CUDA_SHARED_DEVICE=<name> set: in the POSIX shared-memory object /dev/shm/<name>, mapped
//   by every process that names it. Unset: in memory private to the process. Both are the same
//   TimelineSegment, driven by the same code, so the two modes cannot drift apart.
//
// Why there is no lock and no initialisation step
//   A process may be SIGKILLed at any instruction (the scheduler's tests do it on purpose), so
//   nothing here may be left "held" or "half-initialised" by a dead process:
//   - all-zero bytes are a valid, ready segment (every device free since boot, nothing run), so
//     the object is usable the moment ftruncate has sized it. Every process opens it with O_CREAT
//     and grows it to its size if it is smaller; two processes doing so race harmlessly (the
//     kernel zero-fills, and the size they set is the same);
//   - every field is a lock-free atomic word, changed by one compare-exchange or fetch_add.
//
// Contract: callers hold the process's Session (which orders the process's own threads);
// between processes only the atomics below order anything.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tests/fake_driver/cuda/knobs.h"
#include "tests/fake_driver/cuda/process_table.h"

namespace fake_cuda {

struct TimelineSegment {
  // "FAKETIM" and the layout version. Written once, by compare-exchange from 0, by the first
  // process that maps the object; 0 (not yet claimed) is as valid as this value. Any other value
  // is another layout: the mapping is refused.
  static constexpr std::uint64_t kTag = 0x46414b4554494d00ull | 2u;
  std::atomic<std::uint64_t> tag;

  struct alignas(64) Device {
    // CLOCK_MONOTONIC ns at which the last kernel placed on this device ends (0: never used).
    // Only grows. Writers: every launching process, by compare-exchange from the value it based
    // its kernel's start on, so two kernels never overlap. A process killed after its CAS still
    // "runs" its kernel: the device stays busy until then, as a GPU finishes a dead context's
    // queued work.
    std::atomic<std::int64_t> tail_ns;
    // Kernel time placed on the device, all processes (ns), and the kernels; fetch_add after the
    // CAS above. A process killed between the two leaves out one kernel: counters may
    // undercount by one kernel per killed process, never overcount.
    std::atomic<std::uint64_t> busy_ns;
    std::atomic<std::uint64_t> kernels;
  };
  Device devices[kMaxDevices];
  // Since layout 2: who uses the devices, and what each holds.
  ProcessTable processes;
};

static_assert(std::atomic<std::int64_t>::is_always_lock_free &&
                  std::atomic<std::uint64_t>::is_always_lock_free,
              "shared across processes: the atomics must not hide a lock");
static_assert(std::is_standard_layout_v<TimelineSegment>, "its layout is shared between builds");
static_assert(sizeof(TimelineSegment) == 64 + kMaxDevices * 64 + sizeof(ProcessTable),
              "layout change: bump kTag");

class DeviceTimeline {
 public:
  DeviceTimeline() = default;
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;
  ~DeviceTimeline() { detach(); }

  // Maps the shared object knobs.shared_device names, or uses a fresh private segment when none
  // is named. CUDA_ERROR_OPERATING_SYSTEM when the object cannot be opened or holds another
  // layout (a private segment is used then, and the reason is in error()).
  CUresult attach(const Knobs& knobs);
  void detach();
  const std::string& error() const { return error_; }
  bool shared() const { return mapping_ != nullptr; }

  // Places a kernel of duration_ns on dev, starting no earlier than ready_ns nor before the
  // device has finished everything placed before it; returns its end. duration_ns 0 only reads
  // the device: its "end" is when the device is free.
  std::int64_t place_kernel(int dev, std::int64_t ready_ns, std::int64_t duration_ns);

  std::int64_t free_at(int dev) const { return device(dev).tail_ns.load(std::memory_order_acquire); }
  std::uint64_t busy_ns(int dev) const { return device(dev).busy_ns.load(std::memory_order_relaxed); }
  std::uint64_t kernels(int dev) const { return device(dev).kernels.load(std::memory_order_relaxed); }
  ProcessTable& processes() { return segment_->processes; }

 private:
  TimelineSegment::Device& device(int dev) { return segment_->devices[dev]; }
  const TimelineSegment::Device& device(int dev) const { return segment_->devices[dev]; }
  CUresult map_shared(const std::string& name);

  TimelineSegment* segment_ = nullptr;            // the mapping, or private_.get()
  void* mapping_ = nullptr;                        // set when shared
  std::unique_ptr<TimelineSegment> private_;
  std::string error_;
};

}  // namespace fake_cuda
