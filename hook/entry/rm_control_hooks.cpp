// ioctl: the kernel driver's own door, under both CUDA and NVML. Every process list NVML
// builds, through its public functions or through the internal export table nvidia-smi uses
// (docs/design/hook.md), comes from the resource manager's NV2080_CTRL_CMD_GPU_GET_PIDS control on
// /dev/nvidiactl (nvidia_rm_abi.h). Its answer is filtered here, in place, to the processes
// this one may see (process_visibility.h), so that inside a tenant nvidia-smi lists neither
// another tenant's pids nor, since NVML asks each listed pid's memory next, their usage.
//
// The same door shows the process's channel groups being allocated, freed and given a time
// slice by libcuda: those go to channel_groups.h, which shortens the slices below a
// higher-priority tenant.
//
// Every ioctl of the process passes through here, and libcuda issues many: the fast path is
// the call itself plus a masked compare of the request against five constants. No lock,
// allocation, log or getenv; errno is the next ioctl's. Only a successful RM control,
// allocation or free reaches the slow path, and only a GET_PIDS that RM answered with NV_OK,
// with a parameter block at least as large as NVIDIA's struct, in a process whose lists are
// filtered, is changed.
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hook/base/nvidia_rm_abi.h"
#include "hook/bookkeeping/channel_groups.h"
#include "hook/driver/driver.h"
#include "hook/entry/process_visibility.h"

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

// An allocation or a free succeeded: follow the channel groups.
void after_alloc_or_free(int fd, uint32_t key, const void* arg) {
  if (key == rm::kRmFreeRequest) {
    rm::FreeParams f;
    std::memcpy(&f, arg, sizeof f);
    if (f.status == rm::kOk) channel_groups::freed(f.hRoot, f.hObjectOld);
    return;
  }
  uint32_t client, handle, cls, status;
  if (key == rm::kRmAlloc64Request) {
    rm::AllocParams64 a;
    std::memcpy(&a, arg, sizeof a);
    client = a.hRoot, handle = a.hObjectNew, cls = a.hClass, status = a.status;
  } else {
    rm::AllocParams a;
    std::memcpy(&a, arg, sizeof a);
    client = a.hRoot, handle = a.hObjectNew, cls = a.hClass, status = a.status;
  }
  if (status == rm::kOk && cls == rm::kClassChannelGroup) channel_groups::allocated(fd, client, handle);
}

// The control block of an RM control request, or of the XFER wrapper's (nullptr: it carries
// none).
const void* control_block(uint32_t key, void* arg) {
  if (key != rm::kXferRequest) return arg;
  rm::IoctlXfer xfer;
  std::memcpy(&xfer, arg, sizeof xfer);
  if (xfer.cmd != rm::kEscRmControl || xfer.size != sizeof(rm::ControlParams) || xfer.ptr == 0) return nullptr;
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(xfer.ptr));
}

// A control the kernel answered, with its parameters in the caller's memory, of `cmd` and of
// parameters at least `params_size` long (not a serialized one: those carry no plain block).
bool answered(const rm::ControlParams& control, uint32_t cmd, size_t params_size) {
  return control.cmd == cmd && control.status == rm::kOk && (control.flags & rm::kFlagFinnSerialized) == 0 &&
         control.params != 0 && control.paramsSize >= params_size;
}

// A successful RM control: follow a time slice the driver set, filter a GPU's pids.
void after_control(const rm::ControlParams& control) {
  void* params = reinterpret_cast<void*>(static_cast<uintptr_t>(control.params));
  if (answered(control, rm::kCmdSetTimeslice, sizeof(rm::TimesliceParams))) {
    rm::TimesliceParams p;
    std::memcpy(&p, params, sizeof p);
    channel_groups::driver_set(control.hClient, control.hObject, p.timesliceUs);
    return;
  }
  // Deciding may initialise the hook (driver, scheduler registration).
  if (answered(control, rm::kCmdGpuGetPids, sizeof(rm::GetPidsParams)) && process_visibility::filtered())
    filter_pids(params, control.paramsSize);
}

// A request the kernel took as an RM control (or the XFER wrapper, which may carry one), an
// allocation or a free succeeded: filter it if it read a GPU's pids; follow channel groups.
// The caller's errno stays as the kernel left it.
__attribute__((noinline)) void after_rm_request(int fd, uint32_t key, void* arg) {
  if (arg == nullptr) return;
  const int saved_errno = errno;
  if (key != rm::kRmControlRequest && key != rm::kXferRequest) {
    after_alloc_or_free(fd, key, arg);
  } else if (const void* block = control_block(key, arg); block != nullptr) {
    rm::ControlParams control;
    std::memcpy(&control, block, sizeof control);
    after_control(control);
  }
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
  if (__builtin_expect(r == 0 && (key == rm::kRmControlRequest || key == rm::kXferRequest || key == rm::kRmAlloc64Request ||
                                   key == rm::kRmAllocRequest || key == rm::kRmFreeRequest),
                       0))
    after_rm_request(fd, key, arg);
  return r;
}

}  // extern "C"
