// The fast suspension's host memory (host_pool.h). Pinned blocks are handed out front to back
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

constexpr int kMaxBlocks = 4096;  // 4 TiB of pinned memory

struct Pool {
  void* block[kMaxBlocks] = {};
  int blocks = 0;
  int current = 0;       // the block take() cuts from
  uint64_t offset = 0;   // within it
  uint64_t taken = 0;    // pinned bytes handed out and not given back
  int device = -1;       // whose primary context the blocks were made in
};
Pool g_pool;

using HostAlloc = CUresult(CUDAAPI*)(void**, size_t, unsigned int);
using CtxSet = CUresult(CUDAAPI*)(CUcontext);

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
  static const auto alloc = cuda_function<HostAlloc>("cuMemHostAlloc");
  static const auto set = cuda_function<CtxSet>("cuCtxSetCurrent");
  if (alloc == nullptr || set == nullptr || set(context) != CUDA_SUCCESS) return false;
  void* p = nullptr;
  if (alloc(&p, kBlockBytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS || p == nullptr) return false;
  g_pool.block[g_pool.blocks++] = p;
  g_pool.device = device;
  return true;
}

void forget_device(int device) noexcept {
  if (device == g_pool.device) renew_in_child(g_pool);  // the reset freed them: nothing to free
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
  // Pinned memory is not the child's (its CUDA state does not survive fork).
  renew_in_child(g_pool);
}

}  // namespace cuslice::host_pool
