// Streams, stream capture and events, on the simulated timeline (stream_order.h): queries say
// CUDA_ERROR_NOT_READY until the queued work's simulated end, synchronisations sleep until then
// (without the driver's lock), and an event completes when the work queued before its record
// does. Synchronising also lets the stream-ordered pools release their unused reserve.
//
// cuStreamWaitValue32_v2 / cuStreamWriteValue32_v2 (and _ptsz) on pinned host memory: a wait
// its word does not yet satisfy holds the stream's later work until it does, a write stores its
// word once the work before it has ended (stream_order.h says how, and what is approximated);
// neither blocks the calling thread. Synchronisations then poll (kPollNs) until the held work
// has a time, and queries answer CUDA_ERROR_NOT_READY meanwhile.
//
// Capture: between cuStreamBeginCapture_v2 and cuStreamEndCapture, cuMemAllocAsync /
// cuMemFreeAsync and kernel launches on the stream become nodes of the captured graph and run
// nothing; event records and waits on a capturing stream are accepted and not recorded.
// Capturing the null, legacy or per-thread stream is refused. As measured on the H100
// (docs/evidence/benchmarks.md): a cuEventQuery of an event not yet complete, from any thread and in
// any capture mode, while a capture is in progress, invalidates every capture in progress:
// cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
#include <algorithm>
#include <cstring>
#include <utility>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/mem_pools.h"
#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/cuda/stream_order.h"

using namespace fake_cuda;

namespace {

CUresult create_stream(CUstream* stream, unsigned int flags, int priority) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (stream == nullptr || (flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  auto created = std::make_unique<CUstream_st>();
  created->ctx = ctx;
  created->flags = flags;
  created->priority = priority;
  *stream = s->streams.add(std::move(created));
  return CUDA_SUCCESS;
}

bool capturing(const CUstream_st* stream_state) {
  return stream_state != nullptr && stream_state->capture != nullptr;
}

CUresult synchronize_stream(CUstream stream, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue, &stream_state)) return rc;
  if (capturing(stream_state)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult rc = mps_check(s->mps)) return rc;
  // Looked up again after each poll: the stream may have been destroyed meanwhile (its work is
  // then no longer waited for).
  s.wait_until([&] {
    StreamQueue again;
    return StreamQueue::resolve(*s, stream, zero, &again) ? 0 : again.completes_at(*s);
  });
  // Held work that ran meanwhile may have faulted (FAKE_CUDA_FAULT_ON_UNMAPPED).
  CUctx_st* ctx = nullptr;
  if (s->stream_context(stream, &ctx) == CUDA_ERROR_ILLEGAL_ADDRESS) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (CUresult rc = mps_check(s->mps)) return rc;  // the server ended meanwhile
  release_pool_reserves_on_sync(*s);
  return CUDA_SUCCESS;
}

CUresult query_stream(CUstream stream, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  StreamQueue queue;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue)) return rc;
  return queue.completes_at(*s) > monotonic_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult is_capturing(CUstream stream, CUstreamCaptureStatus* status) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  const bool active = stream_state != nullptr && stream_state->capture != nullptr;
  *status = active ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult begin_capture(CUstream stream, CUstreamCaptureMode mode) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  if (stream_state == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (stream_state->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  stream_state->capture = s->graphs.add(std::make_unique<CUgraph_st>());
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream stream, CUgraph* graph) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  if (stream_state == nullptr || stream_state->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  const bool invalidated = stream_state->capture_invalidated;
  *graph = invalidated ? nullptr : stream_state->capture;
  stream_state->capture = nullptr;
  stream_state->capture_invalidated = false;
  return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult record_event(CUevent event, CUstream stream, unsigned int flags, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if ((flags & ~CU_EVENT_RECORD_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue, &stream_state)) return rc;
  if (capturing(stream_state)) return CUDA_SUCCESS;
  event->recorded = true;
  event->completion = enqueue_record(*s, queue);
  return CUDA_SUCCESS;
}

CUresult wait_event(CUstream stream, CUevent event, unsigned int flags, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if ((flags & ~CU_EVENT_WAIT_EXTERNAL) != 0) return CUDA_ERROR_INVALID_VALUE;
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue, &stream_state)) return rc;
  // Waiting for an event never recorded is waiting for nothing, as on the real driver.
  if (!capturing(stream_state) && event->recorded) enqueue_event_wait(*s, queue, event->completion);
  return CUDA_SUCCESS;
}

// cuStreamWaitValue32_v2 and cuStreamWriteValue32_v2: on pinned host memory only, whose
// "device" address is its host address (unified addressing); the word must be 4-byte aligned.
CUresult value_operation(CUstream stream, CUdeviceptr address, cuuint32_t value,
                         unsigned int flags, bool wait, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (wait) {
    const unsigned int condition = flags & ~CU_STREAM_WAIT_VALUE_FLUSH;
    if (condition > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  } else if ((flags & ~CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* word = reinterpret_cast<std::uint32_t*>(address);
  if (address % alignof(std::uint32_t) != 0 || !s->is_host_range(word, sizeof *word)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue, &stream_state)) return rc;
  if (capturing(stream_state)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (wait) {
    enqueue_value_wait(*s, queue, word, value, flags & ~CU_STREAM_WAIT_VALUE_FLUSH);
  } else {
    enqueue_value_write(*s, queue, word, value);
  }
  return CUDA_SUCCESS;
}

CUresult elapsed_time(float* milliseconds, CUevent start, CUevent end) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->events.contains(start) || !s->events.contains(end)) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (std::max(start->completes_at(), end->completes_at()) > monotonic_ns()) {
    return CUDA_ERROR_NOT_READY;
  }
  *milliseconds = static_cast<float>(end->completes_at() - start->completes_at()) / 1e6f;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
  return create_stream(stream, flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return create_stream(stream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->streams.contains(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture != nullptr) s->graphs.remove(stream->capture);
  // Work held behind a wait still runs once the wait passes, as on a GPU.
  if (stream->lane.blocked()) stream->ctx->orphans.push_back(std::move(stream->lane));
  s->streams.remove(stream);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  return synchronize_stream(stream, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream stream) {
  return synchronize_stream(stream, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuStreamQuery(CUstream stream) {
  return query_stream(stream, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream stream) {
  return query_stream(stream, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  return wait_event(stream, event, flags, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned int flags) {
  return wait_event(stream, event, flags, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr address, cuuint32_t value,
                                        unsigned int flags) {
  return value_operation(stream, address, value, flags, true, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr address,
                                             cuuint32_t value, unsigned int flags) {
  return value_operation(stream, address, value, flags, true, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr address, cuuint32_t value,
                                         unsigned int flags) {
  return value_operation(stream, address, value, flags, false, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr address,
                                              cuuint32_t value, unsigned int flags) {
  return value_operation(stream, address, value, flags, false, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return is_capturing(stream, status);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status) {
  return is_capturing(stream, status);
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(stream, mode);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(stream, mode);
}

CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  return end_capture(stream, graph);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  return end_capture(stream, graph);
}

// The mode is kept per thread and handed back; the fake does not invalidate captures, so the mode
// changes nothing else (helper threads of an interposer call this before touching the driver).
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  thread_local CUstreamCaptureMode current = CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Read as an integer: an application may pass any bits, and loading those as the enum
  // would be undefined.
  int asked = 0;
  std::memcpy(&asked, mode, sizeof asked);
  if (asked != CU_STREAM_CAPTURE_MODE_GLOBAL && asked != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      asked != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::swap(current, *mode);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  auto created = std::make_unique<CUevent_st>();
  created->ctx = ctx;
  created->flags = flags;
  *event = s->events.add(std::move(created));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  return record_event(event, stream, 0, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return record_event(event, stream, 0, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent event, CUstream stream, unsigned int flags) {
  return record_event(event, stream, flags, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream, unsigned int flags) {
  return record_event(event, stream, flags, DefaultStream::kPerThread);
}

// An event never recorded counts as complete, as on the real driver.
CUresult CUDAAPI cuEventQuery(CUevent event) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (event->ctx->faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (event->completes_at() <= monotonic_ns()) return CUDA_SUCCESS;
  s->streams.for_each([](CUstream_st& st) {
    if (st.capture != nullptr) st.capture_invalidated = true;
  });
  return CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  if (event->ctx->faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (CUresult rc = mps_check(s->mps)) return rc;
  // The record waited for, even if the event is re-recorded or destroyed meanwhile.
  const Completion completion = event->completion;
  CUctx_st* ctx = event->ctx;
  s.wait_until([&] { return completion ? *completion : 0; });
  if (s->is_live_context(ctx) && ctx->faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (CUresult rc = mps_check(s->mps)) return rc;
  release_pool_reserves_on_sync(*s);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent event) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  s->events.remove(event);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  return elapsed_time(milliseconds, start, end);
}

CUresult CUDAAPI cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
  return elapsed_time(milliseconds, start, end);
}

}  // extern "C"
