// The fake resource manager: answers the NVIDIA kernel driver's RM control ioctl for the
// hook's tests (fake_rm_control.h says what and how). Preloaded after libcuslice.so.
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>

#include "fake_rm_control.h"
#include "nvidia_rm_abi.h"

namespace {

namespace rm = cuslice::rm;

struct Answer {
  uint32_t pids[rm::kGetPidsMaxCount] = {};
  uint32_t count = 0;
  uint32_t status = rm::kOk;
  int result = 0;
  int error = 0;
};
Answer g_answer;
std::atomic<unsigned long> g_requests{0};

using Ioctl = int (*)(int, unsigned long, ...);

int next_ioctl(int fd, unsigned long request, void* arg) {
  static Ioctl next = reinterpret_cast<Ioctl>(dlsym(RTLD_NEXT, "ioctl"));
  return next ? next(fd, request, arg) : static_cast<int>(syscall(SYS_ioctl, fd, request, arg));
}

int answer(void* block) {
  g_requests.fetch_add(1, std::memory_order_relaxed);
  rm::ControlParams control;
  std::memcpy(&control, block, sizeof control);
  if (control.params != 0 && control.paramsSize >= offsetof(rm::GetPidsParams, pidTbl)) {
    auto* out = reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(control.params));
    const uint32_t room = (control.paramsSize - offsetof(rm::GetPidsParams, pidTbl)) / sizeof(uint32_t);
    const uint32_t n = std::min(g_answer.count, room);
    std::memcpy(out + offsetof(rm::GetPidsParams, pidTblCount), &n, sizeof n);
    std::memcpy(out + offsetof(rm::GetPidsParams, pidTbl), g_answer.pids, n * sizeof(uint32_t));
  }
  control.status = g_answer.status;
  std::memcpy(block, &control, sizeof control);
  if (g_answer.result != 0) errno = g_answer.error;
  return g_answer.result;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void fake_rm_set_answer(const uint32_t* pids, uint32_t count,
                                                                uint32_t rm_status, int result, int error) {
  g_answer.count = std::min<uint32_t>(count, rm::kGetPidsMaxCount);
  if (g_answer.count > 0) std::memcpy(g_answer.pids, pids, g_answer.count * sizeof(uint32_t));
  g_answer.status = rm_status;
  g_answer.result = result;
  g_answer.error = error;
}

__attribute__((visibility("default"))) unsigned long fake_rm_requests(void) {
  return g_requests.load(std::memory_order_relaxed);
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  const uint32_t key = rm::request_key(request);
  if (arg != nullptr && key == rm::kRmControlRequest) return answer(arg);
  if (arg != nullptr && key == rm::kXferRequest) {
    rm::IoctlXfer xfer;
    std::memcpy(&xfer, arg, sizeof xfer);
    if (xfer.cmd == rm::kEscRmControl && xfer.size == sizeof(rm::ControlParams) && xfer.ptr != 0)
      return answer(reinterpret_cast<void*>(static_cast<uintptr_t>(xfer.ptr)));
  }
  return next_ioctl(fd, request, arg);
}

}  // extern "C"
