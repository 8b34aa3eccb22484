// Streams, stream capture and events. Work completes the moment it is enqueued, so queries say
// "done", and synchronising only lets the stream-ordered pools release their unused reserve.
//
// Capture is modelled for memory only: between cuStreamBeginCapture_v2 and cuStreamEndCapture,
// cuMemAllocAsync / cuMemFreeAsync on the stream become nodes of the captured graph (graph
// memory, as on the real driver); other work enqueued meanwhile is not recorded. Capturing the
// null, legacy or per-thread stream is refused.
#include <chrono>

#include "driver_state.h"
#include "mem_pools.h"

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

CUresult synchronize_stream(CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  if (stream_state != nullptr && stream_state->capture != nullptr) {
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  release_pool_reserves_on_sync(*s);
  return CUDA_SUCCESS;
}

CUresult query_stream(CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  CUctx_st* ctx = nullptr;
  return s->stream_context(stream, &ctx);
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
  *graph = stream_state->capture;
  stream_state->capture = nullptr;
  return CUDA_SUCCESS;
}

CUresult record_event(CUevent event, CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx)) return rc;
  event->recorded = true;
  event->recorded_at = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}

CUresult elapsed_time(float* milliseconds, CUevent start, CUevent end) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->events.contains(start) || !s->events.contains(end)) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  std::chrono::duration<float, std::milli> elapsed = end->recorded_at - start->recorded_at;
  *milliseconds = elapsed.count();
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
  s->streams.remove(stream);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) { return synchronize_stream(stream); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream stream) { return synchronize_stream(stream); }
CUresult CUDAAPI cuStreamQuery(CUstream stream) { return query_stream(stream); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream stream) { return query_stream(stream); }

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

CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) { return record_event(event, stream); }

CUresult CUDAAPI cuEventRecord_ptsz(CUevent event, CUstream stream) {
  return record_event(event, stream);
}

CUresult CUDAAPI cuEventQuery(CUevent event) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  return s->events.contains(event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuEventSynchronize(CUevent event) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->events.contains(event)) return CUDA_ERROR_INVALID_HANDLE;
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
