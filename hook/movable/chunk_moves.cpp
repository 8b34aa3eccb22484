// The mover's operations on movable memory (movable_memory.h: move_out, move_back), on the
// records of movable_chunks.h, under their lock. A move out copies chunks to host memory, then
// gives their physical memory back; a move back makes it all again, maps it at the same
// addresses and copies it in, or undoes every step. May call driver, host_pool and
// movable_chunks.
#include <algorithm>

#include "hook/movable/host_pool.h"
#include "hook/movable/movable_chunks.h"
#include "hook/movable/movable_memory.h"

namespace cuslice::movable {
namespace {

Chunk& picked(uint32_t k) { return g_records.chunks[g_records.picked[k]]; }

// Picks the records of `device` on the GPU, the largest allocations first: the fewest, and
// the least likely to be in use at every step. Returns how many.
uint32_t pick_on_gpu(int device) {
  Records& g = g_records;
  uint32_t n = 0;
  for (uint32_t i = 0; i < g.used; ++i)
    if (g.chunks[i].base != 0 && g.chunks[i].device == device && g.chunks[i].handle != 0) g.picked[n++] = i;
  std::sort(g.picked, g.picked + n, [](uint32_t a, uint32_t b) {
    const Chunk &x = g_records.chunks[a], &y = g_records.chunks[b];
    if (x.alloc_size != y.alloc_size) return x.alloc_size > y.alloc_size;
    return x.va < y.va;
  });
  return n;
}

// The device's copy streams, in its primary context made current; nullptr if the driver
// refuses.
CUstream* copy_streams(int device) {
  CUcontext ctx = primary(device);
  return ctx != nullptr && api().set_current(ctx) == CUDA_SUCCESS ? streams(device) : nullptr;
}

// Starts copying picked chunks to host memory until `bytes` are covered or the host has no
// more room; returns how many copies it started.
uint32_t copy_out(uint32_t n, uint64_t bytes, uint64_t host_reserve, CUstream* s, bool* failed) {
  auto copy = real<Sym::cuMemcpyDtoHAsync_v2>();
  uint32_t copied = 0;
  uint64_t covered = 0;
  for (; copied < n && covered < bytes; ++copied) {
    Chunk& c = picked(copied);
    bool pinned = false;
    void* host = host_pool::take(c.size, host_reserve, &pinned);
    if (host == nullptr) break;  // the host has no more room: what fits goes
    if (noted("cuMemcpyDtoHAsync", copy(host, c.va, c.size, s[copied % kStreams])) != CUDA_SUCCESS) {
      host_pool::give_back(host, c.size, pinned);
      *failed = true;
      break;
    }
    c.host = host;
    c.pinned = pinned;
    covered += c.size;
  }
  return copied;
}

// The first `copied` picked chunks' copies go back to the pool; the chunks stay on the GPU.
void drop_copies(uint32_t copied) {
  for (uint32_t k = 0; k < copied; ++k) {
    Chunk& c = picked(k);
    host_pool::give_back(c.host, c.size, c.pinned);
    c.host = nullptr;
  }
}

// With the copies complete: gives the copied chunks' physical memory back; returns the bytes
// moved off the GPU.
uint64_t release_copied(uint32_t copied, bool* failed) {
  uint64_t moved = 0;
  for (uint32_t k = 0; k < copied; ++k) {
    Chunk& c = picked(k);
    if (c.host == nullptr) continue;
    if (noted("cuMemUnmap", api().unmap(c.va, c.size)) != CUDA_SUCCESS) {
      host_pool::give_back(c.host, c.size, c.pinned);
      c.host = nullptr;
      *failed = true;
      continue;
    }
    real<Sym::cuMemRelease>()(c.handle);
    c.handle = 0;
    moved += c.size;
    g_records.on_gpu.fetch_sub(c.size, std::memory_order_relaxed);
    g_records.off_gpu.fetch_add(c.size, std::memory_order_relaxed);
  }
  return moved;
}

// Picks every record off the GPU; returns how many.
uint32_t pick_off_gpu() {
  Records& g = g_records;
  uint32_t n = 0;
  for (uint32_t i = 0; i < g.used; ++i)
    if (g.chunks[i].base != 0 && g.chunks[i].handle == 0) g.picked[n++] = i;
  return n;
}

// Physical memory for all of it first: a GPU without room for everything leaves everything
// where it is, and the scheduler asks again later. *made: the handles made.
Back make_all(uint32_t n, uint32_t* made) {
  for (*made = 0; *made < n; ++*made) {
    Chunk& c = picked(*made);
    const CUmemAllocationProp prop = prop_of(c.device);
    const CUresult r = noted("cuMemCreate", real<Sym::cuMemCreate>()(&c.handle, c.size, &prop, 0));
    if (r != CUDA_SUCCESS) {
      c.handle = 0;
      return r == CUDA_ERROR_OUT_OF_MEMORY ? Back::kNoRoom : Back::kFailed;
    }
  }
  return Back::kDone;
}

// Maps every chunk at its address with its access. *mapped: the chunks mapped.
Back map_all(uint32_t n, uint32_t* mapped) {
  for (*mapped = 0; *mapped < n; ++*mapped) {
    Chunk& c = picked(*mapped);
    if (noted("cuMemMap", api().map(c.va, c.size, 0, c.handle, 0)) != CUDA_SUCCESS) return Back::kFailed;
    if (noted("cuMemSetAccess", grant(c.device, c.va, c.size)) != CUDA_SUCCESS) {
      api().unmap(c.va, c.size);
      return Back::kFailed;
    }
  }
  return Back::kDone;
}

// Copies every chunk back from host memory and waits for the copies.
Back copy_all_in(uint32_t n) {
  auto copy = real<Sym::cuMemcpyHtoDAsync_v2>();
  Back outcome = Back::kDone;
  uint32_t devices = 0;
  for (uint32_t k = 0; k < n && outcome == Back::kDone; ++k) {
    Chunk& c = picked(k);
    CUstream* s = copy_streams(c.device);
    if (s == nullptr || noted("cuMemcpyHtoDAsync", copy(c.va, c.host, c.size, s[k % kStreams])) != CUDA_SUCCESS)
      outcome = Back::kFailed;
    devices |= uint32_t{1} << (c.device & 31);
  }
  for (int d = 0; d < 32 && d < kMaxDevices; ++d)
    if ((devices >> d) & 1u) {
      if (api().set_current(primary(d)) != CUDA_SUCCESS || !sync_all(d)) outcome = Back::kFailed;
    }
  return outcome;
}

// Undone: every chunk off the GPU again, its copy in host memory untouched.
void undo_back(uint32_t mapped, uint32_t made) {
  for (uint32_t k = 0; k < mapped; ++k) api().unmap(picked(k).va, picked(k).size);
  for (uint32_t k = 0; k < made; ++k) {
    Chunk& c = picked(k);
    real<Sym::cuMemRelease>()(c.handle);
    c.handle = 0;
  }
}

// Everything is back: the copies go back to the pool.
void finish_back(uint32_t n) {
  for (uint32_t k = 0; k < n; ++k) {
    Chunk& c = picked(k);
    host_pool::give_back(c.host, c.size, c.pinned);
    c.host = nullptr;
    g_records.on_gpu.fetch_add(c.size, std::memory_order_relaxed);
    g_records.off_gpu.fetch_sub(c.size, std::memory_order_relaxed);
  }
}

}  // namespace

uint64_t move_out(int device, uint64_t bytes, uint64_t host_reserve, bool* failed) noexcept {
  *failed = false;
  if (!valid(device) || bytes == 0) return 0;
  const Lock lock;
  if (g_records.chunks == nullptr) return 0;
  const uint32_t n = pick_on_gpu(device);
  CUstream* s = copy_streams(device);
  if (s == nullptr) {
    *failed = true;
    return 0;
  }
  const uint32_t copied = copy_out(n, bytes, host_reserve, s, failed);
  if (!sync_all(device)) {
    // Nothing was given back yet: the copies are dropped and every chunk stays on the GPU.
    drop_copies(copied);
    *failed = true;
    return 0;
  }
  return release_copied(copied, failed);
}

Back move_back() noexcept {
  const Lock lock;
  if (g_records.chunks == nullptr) return Back::kDone;
  const uint32_t n = pick_off_gpu();
  if (n == 0) return Back::kDone;
  uint32_t made = 0, mapped = 0;
  Back outcome = make_all(n, &made);
  if (outcome == Back::kDone) outcome = map_all(n, &mapped);
  if (outcome == Back::kDone) outcome = copy_all_in(n);
  if (outcome != Back::kDone) {
    undo_back(mapped, made);
    return outcome;
  }
  finish_back(n);
  return Back::kDone;
}

const char* last_failure(int* code) noexcept {
  *code = g_records.failed_code;
  return g_records.failed_call;
}

}  // namespace cuslice::movable
