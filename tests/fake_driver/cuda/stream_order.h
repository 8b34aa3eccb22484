// Stream order within the process: what a new operation on a stream must wait for, and when the
// work queued on a stream or a context ends. The devices' timeline (device_timeline.h) then
// places each kernel among those of every process sharing the device.
//
// What is modelled (CUDA's stream synchronisation behaviour):
//   - a stream runs its work in order;
//   - the legacy default stream (0 in a call without _ptsz, CU_STREAM_LEGACY in any call) waits
//     for the work queued before on the context's blocking streams, and they wait for the work
//     queued before on it;
//   - the per-thread default stream (CU_STREAM_PER_THREAD, or 0 in a _ptsz call) is a blocking
//     stream of its own for each thread and context;
//   - streams created with CU_STREAM_NON_BLOCKING ignore the legacy stream both ways;
//   - synchronising or querying the legacy stream covers what it would wait for, the blocking
//     streams included.
// Every tail only grows, so "the latest of the context's blocking streams" is one number kept up
// to date at each enqueue rather than a scan of the streams.
//
// Callers hold the Session; a StreamQueue is valid until the lock is released.
#pragma once

#include <cstdint>

#include "driver_state.h"

namespace fake_cuda {

// What stream 0 means to the entry point: the legacy stream, or (in _ptsz entry points) the
// calling thread's per-thread stream.
enum class DefaultStream { kLegacy, kPerThread };

class StreamQueue {
 public:
  // The stream's queue; CUDA_ERROR_INVALID_HANDLE / _CONTEXT as DriverState::stream_context.
  // *stream_state: the created stream, or null for the special streams.
  static CUresult resolve(DriverState& state, CUstream stream, DefaultStream zero,
                          StreamQueue* queue, CUstream_st** stream_state = nullptr);

  CUctx_st* context() const { return ctx_; }
  // The earliest time new work on the stream may start, by stream order alone.
  std::int64_t ready() const;
  // When everything queued so far on the stream ends.
  std::int64_t completes_at() const;
  // Work ending at end_ns was queued on the stream.
  void advance(std::int64_t end_ns);

 private:
  enum class Kind { kLegacy, kBlocking, kNonBlocking };
  CUctx_st* ctx_ = nullptr;
  Kind kind_ = Kind::kLegacy;
  std::int64_t* tail_ = nullptr;
};

// Queues a kernel of duration_ns: it starts once the stream is ready, the device is free and
// not before now; returns its end and counts its time for the process.
std::int64_t enqueue_kernel(DriverState& state, StreamQueue& queue, std::int64_t duration_ns);

// Queues a marker that takes no device time (an event record, a wait on an event) and ends once
// the stream is ready and after_ns has passed; returns when it ends, not before now.
std::int64_t enqueue_marker(StreamQueue& queue, std::int64_t after_ns = 0);

}  // namespace fake_cuda
