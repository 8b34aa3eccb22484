#include "stream_order.h"

#include <algorithm>

#include "sim_clock.h"

namespace fake_cuda {

CUresult StreamQueue::resolve(DriverState& state, CUstream stream, DefaultStream zero,
                              StreamQueue* queue, CUstream_st** stream_state) {
  CUstream_st* created = nullptr;
  if (CUresult rc = state.stream_context(stream, &queue->ctx_, &created)) return rc;
  if (stream_state != nullptr) *stream_state = created;
  const bool per_thread =
      stream == CU_STREAM_PER_THREAD || (stream == nullptr && zero == DefaultStream::kPerThread);
  if (created != nullptr) {
    queue->kind_ = created->flags & CU_STREAM_NON_BLOCKING ? Kind::kNonBlocking : Kind::kBlocking;
    queue->tail_ = &created->tail;
  } else if (per_thread) {
    queue->kind_ = Kind::kBlocking;
    queue->tail_ = &queue->ctx_->per_thread_tails[std::this_thread::get_id()];
  } else {
    queue->kind_ = Kind::kLegacy;
    queue->tail_ = &queue->ctx_->legacy_tail;
  }
  return CUDA_SUCCESS;
}

std::int64_t StreamQueue::ready() const {
  switch (kind_) {
    case Kind::kLegacy: return std::max(*tail_, ctx_->blocking_tail);
    case Kind::kBlocking: return std::max(*tail_, ctx_->legacy_tail);
    case Kind::kNonBlocking: break;
  }
  return *tail_;
}

std::int64_t StreamQueue::completes_at() const {
  // A blocking stream's own tail already includes the legacy work it waited for.
  return kind_ == Kind::kLegacy ? ready() : *tail_;
}

void StreamQueue::advance(std::int64_t end_ns) {
  *tail_ = std::max(*tail_, end_ns);
  ctx_->all_tail = std::max(ctx_->all_tail, end_ns);
  if (kind_ == Kind::kBlocking) ctx_->blocking_tail = std::max(ctx_->blocking_tail, end_ns);
}

std::int64_t enqueue_kernel(DriverState& state, StreamQueue& queue, std::int64_t duration_ns) {
  const std::int64_t end =
      state.timeline.place_kernel(queue.context()->device, queue.ready(), duration_ns);
  queue.advance(end);
  state.busy_ns += static_cast<unsigned long long>(std::max<std::int64_t>(duration_ns, 0));
  return end;
}

std::int64_t enqueue_marker(StreamQueue& queue, std::int64_t after_ns) {
  const std::int64_t end = std::max({queue.ready(), after_ns, monotonic_ns()});
  queue.advance(end);
  return end;
}

}  // namespace fake_cuda
