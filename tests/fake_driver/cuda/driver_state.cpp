#include "tests/fake_driver/cuda/driver_state.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "tests/fake_driver/cuda/sim_clock.h"

namespace fake_cuda {
namespace {

struct ThreadContextStack {
  unsigned long generation = 0;
  std::vector<CUctx_st*> contexts;
};

thread_local ThreadContextStack tls_stack;

// A context's stream goes with it: its work held behind a wait never runs, and the records
// among that work count as done, so that no one waits for them forever.
void abandon_lane(Lane& lane) {
  for (DeferredOp& op : lane.deferred) {
    if (op.kind == DeferredOp::Kind::kRecord) *op.completion = monotonic_ns();
  }
  lane = Lane{};
}

}  // namespace

DriverState& driver_state() {
  static DriverState* state = new DriverState();
  return *state;
}

std::vector<CUctx_st*>& thread_context_stack(const DriverState& state) {
  if (tls_stack.generation != state.generation) {
    tls_stack.contexts.clear();
    tls_stack.generation = state.generation;
  }
  return tls_stack.contexts;
}

DriverState::DriverState() { build(); }

std::int64_t Session::monotonic_now() { return monotonic_ns(); }

void Session::sleep_until(std::int64_t deadline_ns) { sleep_until_ns(deadline_ns); }

void DriverState::build() {
  knobs = read_knobs_from_environment();
  timeline_status = timeline.attach(knobs);
  ledger.reset(knobs.device_count, knobs.device_memory, &timeline.processes(),
               (knobs.hidden_managed ? ProcessTable::kHasManaged : 0u) | (knobs.hidden_ipc ? ProcessTable::kHasIpc : 0u));
  for (int dev = 0; dev < knobs.device_count; ++dev) {
    primary_contexts[dev] = std::make_unique<CUctx_st>();
    primary_contexts[dev]->device = dev;
    primary_contexts[dev]->primary = true;
    auto pool = std::make_unique<CUmemPoolHandle_st>();
    pool->device = dev;
    default_pools[dev] = current_pools[dev] = pools.add(std::move(pool));
  }
}

void DriverState::reset() {
  ledger.detach();  // what this process held goes with the state, before the table is unmapped
  initialized = false;
  mps.disconnect();
  ++generation;
  for (auto& primary : primary_contexts) primary.reset();
  created_contexts.clear();
  streams.clear();
  events.clear();
  modules.clear();
  functions.clear();
  pools.clear();
  default_pools = {};
  current_pools = {};
  arrays.clear();
  mipmapped_arrays.clear();
  graphs.clear();
  graph_execs.clear();
  graph_pools = {};
  allocations.clear();
  small_pages.clear();  // their charges went with the ledger's row
  while (!host_allocations.empty()) drop_host_block(host_allocations.begin());
  // Held work is dropped with the streams; a running progress thread finds nothing and ends.
  maybe_blocked = false;
  timed_writes.clear();
  va_reservations.clear();
  vmm_mappings.clear();
  unmapped_ranges.clear();
  vmm_handles.clear();
  physical_memory.clear();
  managed_allocations = 0;
  ipc_allocations = 0;
  work_tail = 0;
  module_loaded = false;
  faults = 0;
  proc_address_calls = 0;
  launches = 0;
  busy_ns = 0;
  build();
}

void DriverState::count_checkpoint_blockers(const Allocation& allocation, int delta) {
  if (allocation.kind == AllocationKind::kManaged) managed_allocations += delta;
  if (allocation.kind == AllocationKind::kIpcImport || allocation.ipc_exported) ipc_allocations += delta;
  if (ProcessTable::Row* row = ledger.row()) {
    row->flags.store((managed_allocations > 0 ? ProcessTable::kHasManaged : 0u) |
                     (ipc_allocations > 0 ? ProcessTable::kHasIpc : 0u) | ledger.hidden_flags() |
                     (row->flags.load() & ProcessTable::kRestoreBroken));
  }
}

void DriverState::publish_work() {
  if (ProcessTable::Row* row = ledger.row()) row->work_end_ns.store(maybe_blocked ? kNever : work_tail);
}

CUdeviceptr DriverState::take_address_range(std::size_t bytes) {
  CUdeviceptr base = next_address;
  next_address += round_up(bytes == 0 ? 1 : bytes, kGranularity) + kGranularity;
  return base;
}

bool DriverState::is_live_context(const CUctx_st* ctx) const {
  for (int dev = 0; dev < knobs.device_count; ++dev) {
    if (primary_contexts[dev].get() == ctx) return ctx->retain_count > 0;
  }
  return ctx != nullptr && created_contexts.contains(ctx);
}

CUresult DriverState::current_context(CUctx_st** ctx) {
  auto& stack = thread_context_stack(*this);
  if (stack.empty() || !is_live_context(stack.back())) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = stack.back();
  if ((*ctx)->faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;
  return (*ctx)->active ? CUDA_SUCCESS : activate(*ctx);
}

CUresult DriverState::current_context_fault() {
  auto& stack = thread_context_stack(*this);
  if (stack.empty() || !is_live_context(stack.back())) return CUDA_SUCCESS;
  return stack.back()->faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

void DriverState::fault(CUctx_st* ctx, const char* what) {
  if (ctx->faulted) return;
  ctx->faulted = true;
  ++faults;
  char away[96] = "memory it touches is gone";
  if (!unmapped_ranges.empty()) {
    const auto& [base, size] = *unmapped_ranges.begin();
    std::snprintf(away, sizeof away, "VMM memory [0x%" PRIx64 ", +0x%zx) is unmapped",
                  static_cast<std::uint64_t>(base), size);
  }
  // One line per poisoned context, for a test that sees only the process's stderr.
  std::fprintf(stderr,
               "fake libcuda: fault: %s while %s (FAKE_CUDA_FAULT_ON_UNMAPPED): "
               "CUDA_ERROR_ILLEGAL_ADDRESS, context %p poisoned (fault %llu of pid %d)\n",
               what, away, static_cast<void*>(ctx), faults, static_cast<int>(getpid()));
}

CUresult DriverState::stream_context(CUstream stream, CUctx_st** ctx, CUstream_st** stream_out) {
  if (stream_out != nullptr) *stream_out = nullptr;
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    return current_context(ctx);
  }
  if (!streams.contains(stream)) return CUDA_ERROR_INVALID_HANDLE;
  *ctx = stream->ctx;
  if (stream_out != nullptr) *stream_out = stream;
  return stream->ctx->faulted ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

bool DriverState::is_host_range(const void* p, std::size_t bytes) const {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto after = host_allocations.upper_bound(address);
  if (after == host_allocations.begin()) return false;
  const auto& [base, block] = *std::prev(after);
  return address - base < block.bytes && bytes <= base + block.bytes - address;
}

void DriverState::drop_host_block(std::map<std::uintptr_t, HostBlock>::iterator block) {
  if (block->second.mapped != 0) munmap(reinterpret_cast<void*>(block->first), block->second.mapped);
  host_allocations.erase(block);
}

Allocation* DriverState::find_allocation(CUdeviceptr ptr) {
  auto after = allocations.upper_bound(ptr);
  if (after == allocations.begin()) return nullptr;
  Allocation& candidate = std::prev(after)->second;
  return ptr < candidate.base + candidate.size ? &candidate : nullptr;
}

bool DriverState::device_spans(CUdeviceptr ptr, std::size_t bytes, int device, bool write,
                               Spans* spans) {
  spans->clear();
  if (Allocation* allocation = find_allocation(ptr)) {
    if (bytes > allocation->base + allocation->size - ptr) return false;
    if (!allocation->contents) allocation->contents = std::make_shared<DeviceBytes>(allocation->size);
    spans->push_back(Span{allocation->contents.get(), ptr - allocation->base, bytes});
    return true;
  }
  auto after = vmm_mappings.upper_bound(ptr);
  if (after == vmm_mappings.begin()) return false;
  auto mapping = std::prev(after);
  if (ptr >= mapping->first + mapping->second.size) return false;
  const unsigned char needed = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
  // Through mappings laid end to end (each within the one reservation that holds them all).
  CUdeviceptr at = ptr;
  std::size_t left = bytes;
  for (;;) {
    const auto& [base, map] = *mapping;
    if (device < 0 || device >= kMaxDevices || (map.access[device] & needed) != needed) return false;
    const std::size_t length = std::min<std::size_t>(left, base + map.size - at);
    spans->push_back(Span{map.physical->contents.get(), map.offset + (at - base), length});
    at += length;
    left -= length;
    if (left == 0) return true;
    if (++mapping == vmm_mappings.end() || mapping->first != at) return false;
  }
}

CUresult DriverState::activate(CUctx_st* ctx) {
  if (!ledger.try_charge(ctx->device, FAKE_CUDA_CHARGE_CONTEXT, knobs.context_bytes)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ctx->active = true;
  return CUDA_SUCCESS;
}

bool DriverState::charge_allocation(Allocation& allocation) {
  if (allocation.size >= kGranularity) {
    allocation.charged = round_up(allocation.size, kGranularity);
    return ledger.try_charge(allocation.device, FAKE_CUDA_CHARGE_ALLOCATION, allocation.charged);
  }
  allocation.charged = 0;  // the page holds the charge
  for (std::size_t i = 0; i < small_pages.size(); ++i) {
    SmallPage& page = small_pages[i];
    if (page.live > 0 && page.device == allocation.device && kGranularity - page.used >= allocation.size) {
      page.used += allocation.size;
      page.live++;
      allocation.small_page = static_cast<int>(i);
      return true;
    }
  }
  if (!ledger.try_charge(allocation.device, FAKE_CUDA_CHARGE_ALLOCATION, kGranularity)) return false;
  std::size_t slot = 0;
  while (slot < small_pages.size() && small_pages[slot].live > 0) ++slot;
  if (slot == small_pages.size()) small_pages.emplace_back();
  small_pages[slot] = SmallPage{allocation.device, allocation.size, 1};
  allocation.small_page = static_cast<int>(slot);
  return true;
}

void DriverState::release_allocation(const Allocation& allocation) {
  if (allocation.small_page < 0) {
    ledger.release(allocation.device, FAKE_CUDA_CHARGE_ALLOCATION, allocation.charged);
    return;
  }
  SmallPage& page = small_pages[static_cast<std::size_t>(allocation.small_page)];
  page.used -= allocation.size;
  if (--page.live == 0) {
    page.used = 0;
    ledger.release(allocation.device, FAKE_CUDA_CHARGE_ALLOCATION, kGranularity);
  }
}

void DriverState::deactivate(CUctx_st* ctx) {
  if (!ctx->active) return;
  std::erase_if(allocations, [&](const auto& entry) {
    const Allocation& allocation = entry.second;
    if (allocation.owner != ctx) return false;
    if (allocation.kind == AllocationKind::kDevice || allocation.kind == AllocationKind::kManaged) {
      release_allocation(allocation);
    }
    if (allocation.kind != AllocationKind::kPool) count_checkpoint_blockers(allocation, -1);
    return allocation.kind != AllocationKind::kPool;  // pool memory belongs to its pool
  });
  auto drop_array = [&](const auto& array) {
    if (array.owner != ctx) return false;
    ledger.release(array.device, FAKE_CUDA_CHARGE_ARRAY, array.charged);
    return true;
  };
  arrays.remove_if(drop_array);
  mipmapped_arrays.remove_if(drop_array);
  streams.remove_if([&](CUstream_st& stream) {
    if (stream.ctx != ctx) return false;
    abandon_lane(stream.lane);
    return true;
  });
  events.remove_if([&](const CUevent_st& event) { return event.ctx == ctx; });
  functions.remove_if([&](const CUfunc_st& function) { return function.module->ctx == ctx; });
  modules.remove_if([&](const CUmod_st& module) { return module.ctx == ctx; });
  // Its pinned host memory: unmapped, so that a use after the context is gone faults as it can
  // on a GPU host; writes still to come there are dropped (store_due_writes checks the range).
  for (auto block = host_allocations.begin(); block != host_allocations.end();) {
    auto next = std::next(block);
    if (block->second.owner == ctx) drop_host_block(block);
    block = next;
  }
  ledger.release(ctx->device, FAKE_CUDA_CHARGE_MODULE, ctx->module_bytes);
  ctx->module_bytes = 0;
  ledger.release(ctx->device, FAKE_CUDA_CHARGE_CONTEXT, knobs.context_bytes);
  // Its queued work is abandoned with it (the device's timeline keeps the time it was given).
  abandon_lane(ctx->legacy);
  for (auto& [thread, lane] : ctx->per_thread) abandon_lane(lane);
  for (auto& lane : ctx->orphans) abandon_lane(lane);
  ctx->per_thread.clear();
  ctx->orphans.clear();
  ctx->blocking_tail = ctx->all_tail = 0;
  ctx->faulted = false;
  ctx->active = false;
}

}  // namespace fake_cuda
