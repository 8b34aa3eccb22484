// The fast suspension's host memory (host_pool.h). Pinned blocks (memory of the hook's own,
// faulted in, then registered with the driver) are handed out front to back
// within a suspension (a bump pointer per block) and all come back together with the
// resumption, so no free list is needed.
#include "hook/movable/host_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "hook/base/fork_child.h"
#include "hook/driver/driver.h"

namespace cuslice::host_pool {
namespace {

constexpr int kMaxBlocks = 16384;  // 4 TiB of pinned memory

struct Pool {
  void* block[kMaxBlocks] = {};
  int blocks = 0;
  int current = 0;       // the block take() cuts from
  uint64_t offset = 0;   // within it
  uint64_t taken = 0;    // pinned bytes handed out and not given back
  int device = -1;       // whose primary context the blocks were made in
};
Pool g_pool;

using HostRegister = CUresult(CUDAAPI*)(void*, size_t, unsigned int);
using CtxSet = CUresult(CUDAAPI*)(CUcontext);

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Every page of `block` present: the kernel's populate where it has one, else a write to
// each page (the block is fresh, so writing zeros changes nothing).
void fault_in(void* block, uint64_t bytes) noexcept {
  if (madvise(block, bytes, MADV_POPULATE_WRITE) == 0) return;
  const long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<volatile char*>(block);
  for (uint64_t off = 0; off < bytes; off += static_cast<uint64_t>(page > 0 ? page : 4096)) p[off] = 0;
}

// The pool's blocks unmapped (their registration went with the context, or, in a forked
// child, was never the child's) and the pool forgotten.
void unmap_all() noexcept {
  for (int i = 0; i < g_pool.blocks; ++i) munmap(g_pool.block[i], kBlockBytes);
  renew_in_child(g_pool);
}

}  // namespace

uint64_t host_available() noexcept {
  const int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[4096];
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  const char* line = strstr(text, "MemAvailable:");
  if (line == nullptr) return 0;
  return strtoull(line + 13, nullptr, 10) << 10;  // kB
}

bool grow(uint64_t target, uint64_t reserve, int device, CUcontext context) noexcept {
  if (g_pool.blocks > 0 && device != g_pool.device) device = g_pool.device, context = nullptr;
  if (context == nullptr) return false;
  if (g_pool.blocks >= kMaxBlocks || pinned_bytes() + kBlockBytes > target) return false;
  if (host_available() < reserve + kBlockBytes) return false;
  static const auto reg = cuda_function<HostRegister>("cuMemHostRegister_v2");
  static const auto set = cuda_function<CtxSet>("cuCtxSetCurrent");
  if (reg == nullptr || set == nullptr) return false;
  void* p = mmap(nullptr, kBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  madvise(p, kBlockBytes, MADV_HUGEPAGE);  // fewer pages for the driver to pin
  fault_in(p, kBlockBytes);
  if (set(context) != CUDA_SUCCESS || reg(p, kBlockBytes, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
    munmap(p, kBlockBytes);
    return false;
  }
  g_pool.block[g_pool.blocks++] = p;
  g_pool.device = device;
  return true;
}

void forget_device(int device) noexcept {
  if (device == g_pool.device) unmap_all();  // the reset unregistered them
}

uint64_t pinned_bytes() noexcept { return static_cast<uint64_t>(g_pool.blocks) * kBlockBytes; }

void* take(uint64_t bytes, uint64_t reserve, bool* pinned) noexcept {
  if (bytes == 0 || bytes > kBlockBytes) return nullptr;
  while (g_pool.current < g_pool.blocks) {
    if (g_pool.offset + bytes <= kBlockBytes) {
      void* p = static_cast<char*>(g_pool.block[g_pool.current]) + g_pool.offset;
      g_pool.offset += bytes;
      g_pool.taken += bytes;
      *pinned = true;
      return p;
    }
    ++g_pool.current;
    g_pool.offset = 0;
  }
  if (host_available() < reserve + bytes) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  madvise(p, bytes, MADV_HUGEPAGE);  // fewer faults while the copy fills it
  *pinned = false;
  return p;
}

void give_back(void* memory, uint64_t bytes, bool pinned) noexcept {
  if (memory == nullptr) return;
  if (!pinned) {
    munmap(memory, bytes);
    return;
  }
  g_pool.taken = g_pool.taken > bytes ? g_pool.taken - bytes : 0;
  if (g_pool.taken == 0) {
    g_pool.current = 0;
    g_pool.offset = 0;
  }
}

void after_fork_child() noexcept {
  // Pinned memory is not the child's (its CUDA state does not survive fork): its copy of the
  // blocks is plain memory it never uses.
  unmap_all();
}

}  // namespace cuslice::host_pool
