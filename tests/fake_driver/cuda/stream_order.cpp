#include "tests/fake_driver/cuda/stream_order.h"

#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <new>

#include "tests/fake_driver/cuda/sim_clock.h"

namespace fake_cuda {
namespace {

// Calls visit(lane) for every lane of ctx (every context when ctx is null) that may hold work.
template <class Visit>
void for_each_lane(DriverState& state, const CUctx_st* ctx, Visit visit) {
  auto visit_context = [&](CUctx_st& c) {
    if (ctx != nullptr && &c != ctx) return;
    visit(c.legacy);
    for (auto& [thread, lane] : c.per_thread) visit(lane);
    for (Lane& lane : c.orphans) visit(lane);
  };
  for (auto& primary : state.primary_contexts) {
    if (primary) visit_context(*primary);
  }
  state.created_contexts.for_each(visit_context);
  state.streams.for_each([&](CUstream_st& stream) {
    if (ctx == nullptr || stream.ctx == ctx) visit(stream.lane);
  });
}

bool word_satisfies(std::uint32_t word, std::uint32_t value, unsigned int condition) {
  switch (condition) {
    case CU_STREAM_WAIT_VALUE_GEQ: return static_cast<std::int32_t>(word - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return word == value;
    case CU_STREAM_WAIT_VALUE_AND: return (word & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR: return ~(word | value) != 0;
    default: return true;
  }
}

// Another thread or process may store the word at any time, as the GPU would see it.
std::uint32_t load_word(const std::uint32_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }

// The write is reached at at_ns: stored now if that has passed, else when it does.
void write_at(DriverState& state, std::uint32_t* word, std::uint32_t value, std::int64_t at_ns) {
  state.timed_writes.push_back(TimedWrite{word, value, at_ns});
}

// Places a kernel on the timeline behind the stream's placed work.
std::int64_t place_kernel(DriverState& state, StreamQueue& queue, std::int64_t duration_ns) {
  const std::int64_t end =
      state.timeline.place_kernel(queue.context()->device, queue.ready(), duration_ns);
  queue.advance(end);
  state.busy_ns += static_cast<unsigned long long>(std::max<std::int64_t>(duration_ns, 0));
  state.work_tail = std::max(state.work_tail, end);
  state.publish_work();
  return end;
}

// Places a copy on the stream, beside the device's kernels.
std::int64_t place_copy(DriverState& state, StreamQueue& queue, std::int64_t duration_ns) {
  const std::int64_t end = std::max(queue.ready(), monotonic_ns()) + std::max<std::int64_t>(duration_ns, 0);
  queue.advance(end);
  state.work_tail = std::max(state.work_tail, end);
  state.publish_work();
  return end;
}

// Whether a held copy placed now would touch memory that is no longer there.
bool copy_faults(DriverState& state, const Lane& lane, const std::vector<DeviceRange>& ranges) {
  if (!state.knobs.fault_on_unmapped) return false;
  Spans spans;
  for (const DeviceRange& range : ranges) {
    if (!state.device_spans(range.ptr, range.bytes, lane.ctx->device, range.write, &spans)) return true;
  }
  return false;
}

// Places the lane's held work up to the first wait that does not pass; whether it placed any.
bool run_lane(DriverState& state, Lane& lane) {
  StreamQueue queue = StreamQueue::of(lane);
  bool progressed = false;
  for (; lane.blocked(); lane.deferred.pop_front(), progressed = true) {
    DeferredOp& op = lane.deferred.front();
    switch (op.kind) {
      case DeferredOp::Kind::kWaitValue:
        if (state.is_host_range(op.word, sizeof *op.word) &&
            !word_satisfies(load_word(op.word), op.value, op.condition)) {
          return progressed;
        }
        enqueue_marker(queue);
        break;
      case DeferredOp::Kind::kWaitEvent:
        if (*op.completion == kNever) return progressed;
        enqueue_marker(queue, *op.completion);
        break;
      case DeferredOp::Kind::kKernel:
        // A kernel that runs while memory is away faults instead (as a launch would).
        if (state.fault_armed()) {
          state.fault(lane.ctx, "a held kernel ran");
        } else if (!lane.ctx->faulted) {
          place_kernel(state, queue, op.duration_ns);
        }
        break;
      case DeferredOp::Kind::kCopy:
        if (copy_faults(state, lane, op.ranges)) state.fault(lane.ctx, "a held copy ran");
        if (!lane.ctx->faulted) place_copy(state, queue, op.duration_ns);
        break;
      case DeferredOp::Kind::kRecord: *op.completion = enqueue_marker(queue); break;
      case DeferredOp::Kind::kWriteValue:
        write_at(state, op.word, op.value, enqueue_marker(queue));
        break;
    }
  }
  return progressed;
}

void store_due_writes(DriverState& state) {
  if (state.timed_writes.empty()) return;
  const std::int64_t now = monotonic_ns();
  // In the order they are reached (one stream's writes are already in that order).
  std::stable_sort(state.timed_writes.begin(), state.timed_writes.end(),
                   [](const TimedWrite& a, const TimedWrite& b) { return a.at < b.at; });
  auto due = state.timed_writes.begin();
  for (; due != state.timed_writes.end() && due->at <= now; ++due) {
    if (state.is_host_range(due->word, sizeof *due->word)) {
      __atomic_store_n(due->word, due->value, __ATOMIC_RELEASE);
    }
  }
  state.timed_writes.erase(state.timed_writes.begin(), due);
}

// The background thread: what a GPU does with nobody calling the driver (a wait passes when its
// word is written, a write lands when reached). It runs only while something is pending and ends
// once nothing is, so no thread is left to wait on at exit; a later wait or write starts another.
void progress_loop(DriverState& state) {
  std::unique_lock<std::mutex> lock(state.mutex);
  for (;;) {
    make_progress(state);
    if (!state.maybe_blocked && state.timed_writes.empty()) break;
    // Every kPollNs while a wait may pass at any time; else until the next write is reached.
    std::int64_t next = state.maybe_blocked ? monotonic_ns() + kPollNs : kNever;
    for (const TimedWrite& write : state.timed_writes) next = std::min(next, write.at);
    // Woken early by a write or wait added meanwhile (it may be due before `next`).
    state.progress_wake.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(next)));
  }
  state.progress_thread = false;
}

void start_progress_thread(DriverState& state) {
  // A fork must not copy the lock held by the progress thread, which the child lacks: forks wait
  // for the lock, and the child starts its own thread when it needs one.
  static const bool at_fork = [] {
    pthread_atfork([] { driver_state().mutex.lock(); }, [] { driver_state().mutex.unlock(); },
                   [] {
                     driver_state().progress_thread = false;
                     // The parent's thread may have been waiting on it: none does here.
                     new (&driver_state().progress_wake) std::condition_variable();
                     driver_state().mutex.unlock();
                   });
    return true;
  }();
  (void)at_fork;
  if (state.progress_thread) {
    state.progress_wake.notify_one();
    return;
  }
  state.progress_thread = true;
  std::thread([&state] {
    // A write lands when reached, as on a GPU, not up to the default 50 us timer slack late.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    progress_loop(state);
  }).detach();
}

}  // namespace

void make_progress(DriverState& state) {
  if (state.maybe_blocked) {
    // Until a pass places nothing: work placed on one lane may complete a record that a wait on
    // another lane was held for.
    bool progressed = true;
    while (progressed) {
      progressed = false;
      for_each_lane(state, nullptr, [&](Lane& lane) { progressed |= run_lane(state, lane); });
    }
    bool blocked = false;
    for_each_lane(state, nullptr, [&](Lane& lane) { blocked |= lane.blocked(); });
    state.maybe_blocked = blocked;
    state.publish_work();
    auto drop_drained = [](CUctx_st& ctx) {
      ctx.orphans.remove_if([](const Lane& lane) { return !lane.blocked(); });
    };
    for (auto& primary : state.primary_contexts) {
      if (primary) drop_drained(*primary);
    }
    state.created_contexts.for_each(drop_drained);
  }
  store_due_writes(state);
  // Writes placed just now (held work let run) land when reached even if no one calls the
  // driver until then: the progress thread may have ended while nothing was pending.
  if (!state.timed_writes.empty() || state.maybe_blocked) start_progress_thread(state);
}

CUresult StreamQueue::resolve(DriverState& state, CUstream stream, DefaultStream zero,
                              StreamQueue* queue, CUstream_st** stream_state) {
  CUstream_st* created = nullptr;
  if (CUresult rc = state.stream_context(stream, &queue->ctx_, &created)) return rc;
  if (stream_state != nullptr) *stream_state = created;
  const bool per_thread =
      stream == CU_STREAM_PER_THREAD || (stream == nullptr && zero == DefaultStream::kPerThread);
  Lane::Kind kind = Lane::Kind::kLegacy;
  if (created != nullptr) {
    kind = created->flags & CU_STREAM_NON_BLOCKING ? Lane::Kind::kNonBlocking : Lane::Kind::kBlocking;
    queue->lane_ = &created->lane;
  } else if (per_thread) {
    kind = Lane::Kind::kBlocking;
    queue->lane_ = &queue->ctx_->per_thread[std::this_thread::get_id()];
  } else {
    queue->lane_ = &queue->ctx_->legacy;
  }
  queue->lane_->ctx = queue->ctx_;
  queue->lane_->kind = kind;
  return CUDA_SUCCESS;
}

StreamQueue StreamQueue::of(Lane& lane) {
  StreamQueue queue;
  queue.ctx_ = lane.ctx;
  queue.lane_ = &lane;
  return queue;
}

std::int64_t StreamQueue::ready() const {
  switch (lane_->kind) {
    case Lane::Kind::kLegacy: return std::max(lane_->tail, ctx_->blocking_tail);
    case Lane::Kind::kBlocking: return std::max(lane_->tail, ctx_->legacy.tail);
    case Lane::Kind::kNonBlocking: break;
  }
  return lane_->tail;
}

std::int64_t StreamQueue::completes_at(DriverState& state) const {
  if (lane_->blocked()) return kNever;
  if (lane_->kind != Lane::Kind::kLegacy) return lane_->tail;  // includes the legacy work it waited for
  bool blocking_held = false;
  for_each_lane(state, ctx_, [&](const Lane& lane) {
    blocking_held |= lane.kind == Lane::Kind::kBlocking && lane.blocked();
  });
  return blocking_held ? kNever : ready();
}

void StreamQueue::advance(std::int64_t end_ns) {
  lane_->tail = std::max(lane_->tail, end_ns);
  ctx_->all_tail = std::max(ctx_->all_tail, end_ns);
  if (lane_->kind == Lane::Kind::kBlocking) ctx_->blocking_tail = std::max(ctx_->blocking_tail, end_ns);
}

void StreamQueue::defer(DriverState& state, DeferredOp op) {
  lane_->deferred.push_back(std::move(op));
  state.maybe_blocked = true;
  state.publish_work();
  start_progress_thread(state);
}

std::int64_t enqueue_kernel(DriverState& state, StreamQueue& queue, std::int64_t duration_ns) {
  if (!queue.blocked()) return place_kernel(state, queue, duration_ns);
  DeferredOp op;
  op.kind = DeferredOp::Kind::kKernel;
  op.duration_ns = duration_ns;
  queue.defer(state, std::move(op));
  return kNever;
}

std::int64_t enqueue_copy(DriverState& state, StreamQueue& queue, std::int64_t duration_ns,
                          std::vector<DeviceRange> ranges) {
  if (!queue.blocked()) return place_copy(state, queue, duration_ns);
  DeferredOp op;
  op.kind = DeferredOp::Kind::kCopy;
  op.duration_ns = duration_ns;
  op.ranges = std::move(ranges);
  queue.defer(state, std::move(op));
  return kNever;
}

std::int64_t enqueue_marker(StreamQueue& queue, std::int64_t after_ns) {
  const std::int64_t end = std::max({queue.ready(), after_ns, monotonic_ns()});
  queue.advance(end);
  return end;
}

Completion enqueue_record(DriverState& state, StreamQueue& queue) {
  if (!queue.blocked()) return std::make_shared<std::int64_t>(enqueue_marker(queue));
  auto completion = std::make_shared<std::int64_t>(kNever);
  DeferredOp op;
  op.kind = DeferredOp::Kind::kRecord;
  op.completion = completion;
  queue.defer(state, std::move(op));
  return completion;
}

void enqueue_event_wait(DriverState& state, StreamQueue& queue, const Completion& completion) {
  if (!queue.blocked() && *completion != kNever) {
    enqueue_marker(queue, *completion);
    return;
  }
  DeferredOp op;
  op.kind = DeferredOp::Kind::kWaitEvent;
  op.completion = completion;
  queue.defer(state, std::move(op));
}

void enqueue_value_wait(DriverState& state, StreamQueue& queue, std::uint32_t* word,
                        std::uint32_t value, unsigned int condition) {
  if (!queue.blocked() && word_satisfies(load_word(word), value, condition)) {
    enqueue_marker(queue);
    return;
  }
  DeferredOp op;
  op.kind = DeferredOp::Kind::kWaitValue;
  op.word = word;
  op.value = value;
  op.condition = condition;
  queue.defer(state, std::move(op));
}

void enqueue_value_write(DriverState& state, StreamQueue& queue, std::uint32_t* word,
                         std::uint32_t value) {
  if (queue.blocked()) {
    DeferredOp op;
    op.kind = DeferredOp::Kind::kWriteValue;
    op.word = word;
    op.value = value;
    queue.defer(state, std::move(op));
    return;
  }
  write_at(state, word, value, enqueue_marker(queue));
  store_due_writes(state);
  if (!state.timed_writes.empty()) start_progress_thread(state);
}

std::int64_t context_completes_at(DriverState& state, const CUctx_st* ctx) {
  bool held = false;
  for_each_lane(state, ctx, [&](const Lane& lane) { held |= lane.blocked(); });
  return held ? kNever : ctx->all_tail;
}

}  // namespace fake_cuda
