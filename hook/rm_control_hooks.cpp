// ioctl: the kernel driver's own door, under both CUDA and NVML. Every process list NVML
// builds, through its public functions or through the internal export table nvidia-smi uses
// (docs/hook.md), comes from the resource manager's NV2080_CTRL_CMD_GPU_GET_PIDS control on
// /dev/nvidiactl (nvidia_rm_abi.h). Its answer is filtered here, in place, to the processes
// this one may see (process_visibility.h), so that inside a tenant nvidia-smi lists neither
// another tenant's pids nor, since NVML asks each listed pid's memory next, their usage.
//
// Every ioctl of the process passes through here, and libcuda issues many: the fast path is
// the call itself plus one masked compare of the request against two constants. No lock,
// allocation, log or getenv; errno is the next ioctl's. Only a successful RM control reaches
// the slow path, and only a GET_PIDS that RM answered with NV_OK, with a parameter block at
// least as large as NVIDIA's struct, in a process whose lists are filtered, is changed.
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "driver.h"
#include "nvidia_rm_abi.h"
#include "process_visibility.h"

using namespace cuslice;

namespace {

// Drops the pids this process may not see from a GET_PIDS answer of `size` bytes (in place:
// the kept ones move to the front, the freed entries are zeroed, the count shrinks).
void filter_pids(void* params, uint32_t size) {
  auto* bytes = static_cast<unsigned char*>(params);
  uint32_t count;
  std::memcpy(&count, bytes + offsetof(rm::GetPidsParams, pidTblCount), sizeof count);
  const uint32_t capacity = (size - offsetof(rm::GetPidsParams, pidTbl)) / sizeof(uint32_t);
  if (count > capacity) count = capacity;
  unsigned char* table = bytes + offsetof(rm::GetPidsParams, pidTbl);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t pid;
    std::memcpy(&pid, table + i * sizeof pid, sizeof pid);
    if (process_visibility::visible(pid)) std::memcpy(table + kept++ * sizeof pid, &pid, sizeof pid);
  }
  std::memset(table + kept * sizeof(uint32_t), 0, (count - kept) * sizeof(uint32_t));
  std::memcpy(bytes + offsetof(rm::GetPidsParams, pidTblCount), &kept, sizeof kept);
}

// A request the kernel took as an RM control (or the XFER wrapper, which may carry one)
// succeeded: filter it if it read a GPU's pids.
__attribute__((noinline, cold)) void after_rm_request(uint32_t key, void* arg) {
  if (arg == nullptr) return;
  void* block = arg;
  if (key == rm::kXferRequest) {
    rm::IoctlXfer xfer;
    std::memcpy(&xfer, arg, sizeof xfer);
    if (xfer.cmd != rm::kEscRmControl || xfer.size != sizeof(rm::ControlParams) || xfer.ptr == 0) return;
    block = reinterpret_cast<void*>(static_cast<uintptr_t>(xfer.ptr));
  }
  rm::ControlParams control;
  std::memcpy(&control, block, sizeof control);
  if (control.cmd != rm::kCmdGpuGetPids || control.status != rm::kOk ||
      (control.flags & rm::kFlagFinnSerialized) != 0 || control.params == 0 ||
      control.paramsSize < sizeof(rm::GetPidsParams))
    return;
  // Deciding may initialise the hook (driver, scheduler registration): keep the caller's errno.
  const int saved_errno = errno;
  if (process_visibility::filtered())
    filter_pids(reinterpret_cast<void*>(static_cast<uintptr_t>(control.params)), control.paramsSize);
  errno = saved_errno;
}

}  // namespace

extern "C" {

CUSLICE_EXPORT int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);  // as glibc's ioctl reads it
  va_end(ap);
  const PFN_ioctl next = real<Sym::ioctl>();
  const int r = next != nullptr ? next(fd, request, arg) : static_cast<int>(syscall(SYS_ioctl, fd, request, arg));
  const uint32_t key = rm::request_key(request);
  if (__builtin_expect((key == rm::kRmControlRequest || key == rm::kXferRequest) && r == 0, 0))
    after_rm_request(key, arg);
  return r;
}

}  // extern "C"
