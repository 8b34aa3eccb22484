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
// Waits on memory words (cuStreamWaitValue32_v2, on pinned host memory): such a wait cannot be
// placed on the timeline when it is enqueued, since nobody knows when the word will be written.
// A wait that its word does not satisfy at once blocks the stream: it and everything queued
// after it on that stream (kernels with their durations, event records, writes of words, waits
// on words and on events) are kept, in order, in the stream's Lane::deferred instead of being
// placed. make_progress() (on every entry into the driver, every kPollNs in a thread waiting in
// a synchronisation, and in a background progress thread, every kPollNs while a stream is
// blocked and when each write is reached, woken early when work is added) looks at
// the words again; once a wait is satisfied, the operations after it are placed starting then,
// kernels through DeviceTimeline::place_kernel so that they interleave with other processes',
// until the next wait that does not pass. What is modelled while a stream is blocked:
//   - every stream kind (created, legacy, per-thread, also after cuStreamDestroy) can block;
//   - the blocked stream's work ends at kNever: cuStreamQuery says CUDA_ERROR_NOT_READY, events
//     recorded behind it are not complete (their time is set when the record is placed),
//     cuStreamSynchronize / cuEventSynchronize / cuCtxSynchronize poll until it is placed and
//     then sleep until its simulated end; a wait on such an event (cuStreamWaitEvent) blocks the
//     waiting stream in turn until the event's time is known;
//   - querying or synchronising the legacy stream also waits for blocked blocking streams of
//     its context, and cuCtxSynchronize for every blocked stream of the context;
//   - a write of a word (cuStreamWriteValue32_v2) is stored once the work before it on its
//     stream has ended (its simulated end), never before, by whichever of the above runs first
//     after that time (by the progress thread, within its timer's precision).
// What is not modelled (approximations):
//   - implicit ordering across streams with held work: new work on the legacy stream does not
//     wait for work held on a blocking stream, nor new work on a blocking stream for work held
//     on the legacy stream (each waits only for the other's placed work); only explicit event
//     waits carry a block from one stream to another;
//   - a wait is evaluated when make_progress looks at it, not exactly when the stream reaches
//     it: a word satisfied once lets the wait pass even if it changes again before the work
//     before the wait has ended (harmless for the monotonic words CUDA code uses);
//   - a word freed while a wait on it is pending satisfies the wait; a write to freed memory is
//     dropped;
//   - cuGraphLaunch behind a wait is held like one kernel of the graph's kernel time;
//     stream-ordered allocations take no time and do not wait for the stream;
//   - asynchronous copies and sets move their bytes at the call (device_memory.h), held or not;
//     only their time (FAKE_CUDA_COPY_MS_PER_GIB) is queued on the stream, behind its work, and
//     held like a kernel (enqueue_copy). They do not occupy the device's kernel timeline: copy
//     engines run beside kernels.
// Under FAKE_CUDA_FAULT_ON_UNMAPPED, held work placed while memory is away faults as a launch
// would: a kernel (or graph) placed while DriverState::fault_armed(), a copy or set placed when
// a device range it touches is no longer accessible, poisons its context (DriverState::fault).
//
// Callers hold the Session; a StreamQueue is valid until the lock is released.
#pragma once

#include <cstdint>

#include "tests/fake_driver/cuda/driver_state.h"

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

  // The queue of a lane already resolved once (make_progress).
  static StreamQueue of(Lane& lane);

  CUctx_st* context() const { return ctx_; }
  // Whether work on the stream is held behind a wait: new work then joins it.
  bool blocked() const { return lane_->blocked(); }
  // The earliest time new work on the stream may start, by stream order alone (placed work).
  std::int64_t ready() const;
  // When everything queued so far on the stream ends; kNever while any of it is held (for the
  // legacy stream: also while a blocking stream of the context holds work).
  std::int64_t completes_at(DriverState& state) const;
  // Work ending at end_ns was placed on the stream.
  void advance(std::int64_t end_ns);
  // Holds op behind the stream's held work.
  void defer(DriverState& state, DeferredOp op);

 private:
  CUctx_st* ctx_ = nullptr;
  Lane* lane_ = nullptr;
};

// Queues a kernel of duration_ns: it starts once the stream is ready, the device is free and
// not before now; returns its end and counts its time for the process. On a blocked stream it is
// held (its time counted when it is placed) and kNever is returned.
std::int64_t enqueue_kernel(DriverState& state, StreamQueue& queue, std::int64_t duration_ns);

// Queues a copy or a set taking duration_ns on the stream (not on the device's kernel timeline):
// it starts once the stream is ready and not before now; returns its end. On a blocked stream
// it is held, with the device ranges it touches, and kNever is returned.
std::int64_t enqueue_copy(DriverState& state, StreamQueue& queue, std::int64_t duration_ns,
                          std::vector<DeviceRange> ranges);

// Queues a marker that takes no device time and ends once the stream is ready and after_ns has
// passed; returns when it ends, not before now. Only for a stream that is not blocked.
std::int64_t enqueue_marker(StreamQueue& queue, std::int64_t after_ns = 0);

// An event record: the completion of the work queued before it (kNever until known).
Completion enqueue_record(DriverState& state, StreamQueue& queue);

// cuStreamWaitEvent: later work waits for the record's completion.
void enqueue_event_wait(DriverState& state, StreamQueue& queue, const Completion& completion);

// cuStreamWaitValue32: later work waits until *word satisfies condition against value.
// word is host memory of the process (DriverState::is_host_range).
void enqueue_value_wait(DriverState& state, StreamQueue& queue, std::uint32_t* word,
                        std::uint32_t value, unsigned int condition);

// cuStreamWriteValue32: value is stored in *word once the work before it has ended.
void enqueue_value_write(DriverState& state, StreamQueue& queue, std::uint32_t* word,
                         std::uint32_t value);

// When everything queued on the context's streams ends (kNever while any of it is held).
std::int64_t context_completes_at(DriverState& state, const CUctx_st* ctx);

}  // namespace fake_cuda
