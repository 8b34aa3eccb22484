// The fake resource manager: answers the NVIDIA kernel driver's RM control ioctl, and keeps
// channel groups with their time slices, for the hook's tests (fake_rm_control.h says what
// and how). Preloaded after libcuslice.so.
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <algorithm>
#include <mutex>
#include <atomic>
#include <cstddef>
#include <cstring>

#include "hook/base/nvidia_rm_abi.h"
#include "tests/fake_driver/fake_rm_control.h"

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

// Channel groups: allocated with RM's default slice, 1024 us.
struct Group {
  uint32_t client = 0, handle = 0;
  uint64_t us = 0;
  bool used = false;
};
constexpr int kGroups = 64;
Group g_groups[kGroups];
std::mutex g_groups_mutex;
std::atomic<unsigned long> g_slice_sets{0};
std::atomic<uint32_t> g_slice_status{rm::kOk};
constexpr uint32_t kErrInvalidObjectHandle = 0x33;  // NV_ERR_INVALID_OBJECT_HANDLE

Group* find_group(uint32_t client, uint32_t handle) {
  for (Group& g : g_groups)
    if (g.used && g.client == client && g.handle == handle) return &g;
  return nullptr;
}

int alloc_group(void* arg, bool v64) {
  uint32_t client, handle, cls;
  if (v64) {
    rm::AllocParams64 a;
    std::memcpy(&a, arg, sizeof a);
    client = a.hRoot, handle = a.hObjectNew, cls = a.hClass;
  } else {
    rm::AllocParams a;
    std::memcpy(&a, arg, sizeof a);
    client = a.hRoot, handle = a.hObjectNew, cls = a.hClass;
  }
  if (cls != rm::kClassChannelGroup) return -2;  // not ours: the next ioctl's
  uint32_t status = rm::kOk;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    Group* g = find_group(client, handle);
    for (int i = 0; g == nullptr && i < kGroups; ++i)
      if (!g_groups[i].used) g = &g_groups[i];
    if (g != nullptr) *g = {client, handle, 1024, true};
    else status = 0x51;  // NV_ERR_INSUFFICIENT_RESOURCES
  }
  const size_t at = v64 ? offsetof(rm::AllocParams64, status) : offsetof(rm::AllocParams, status);
  std::memcpy(static_cast<unsigned char*>(arg) + at, &status, sizeof status);
  return 0;
}

int free_object(void* arg) {
  rm::FreeParams f;
  std::memcpy(&f, arg, sizeof f);
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  bool found = false;
  for (Group& g : g_groups)
    if (g.used && g.client == f.hRoot && (g.handle == f.hObjectOld || f.hObjectOld == f.hRoot)) {
      g.used = false;
      found = true;
    }
  if (!found) return -2;
  f.status = rm::kOk;
  std::memcpy(arg, &f, sizeof f);
  return 0;
}

// A time-slice control: on a known group, with the status tests ask for.
int slice_control(rm::ControlParams& control, void* block) {
  uint32_t status = kErrInvalidObjectHandle;
  {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    Group* g = find_group(control.hClient, control.hObject);
    if (g != nullptr && control.params != 0 && control.paramsSize >= sizeof(rm::TimesliceParams)) {
      status = g_slice_status.load();
      auto* p = reinterpret_cast<rm::TimesliceParams*>(static_cast<uintptr_t>(control.params));
      if (status == rm::kOk && control.cmd == rm::kCmdSetTimeslice) {
        g->us = p->timesliceUs;
        g_slice_sets.fetch_add(1);
      } else if (status == rm::kOk) {
        p->timesliceUs = g->us;
      }
    }
  }
  control.status = status;
  std::memcpy(block, &control, sizeof control);
  return 0;
}

using Ioctl = int (*)(int, unsigned long, ...);

int next_ioctl(int fd, unsigned long request, void* arg) {
  static Ioctl next = reinterpret_cast<Ioctl>(dlsym(RTLD_NEXT, "ioctl"));
  return next ? next(fd, request, arg) : static_cast<int>(syscall(SYS_ioctl, fd, request, arg));
}

int answer(void* block) {
  g_requests.fetch_add(1, std::memory_order_relaxed);
  rm::ControlParams control;
  std::memcpy(&control, block, sizeof control);
  if (control.cmd == rm::kCmdSetTimeslice || control.cmd == rm::kCmdGetTimeslice) return slice_control(control, block);
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

__attribute__((visibility("default"))) uint64_t fake_rm_timeslice(uint32_t client, uint32_t group) {
  std::lock_guard<std::mutex> lock(g_groups_mutex);
  const Group* g = find_group(client, group);
  return g != nullptr ? g->us : 0;
}

__attribute__((visibility("default"))) unsigned long fake_rm_timeslice_sets(void) { return g_slice_sets.load(); }

__attribute__((visibility("default"))) void fake_rm_set_timeslice_status(uint32_t rm_status) {
  g_slice_status.store(rm_status);
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long request, ...) noexcept {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  const uint32_t key = rm::request_key(request);
  if (arg != nullptr && key == rm::kRmControlRequest) return answer(arg);
  if (arg != nullptr && (key == rm::kRmAllocRequest || key == rm::kRmAlloc64Request)) {
    const int r = alloc_group(arg, key == rm::kRmAlloc64Request);
    if (r != -2) return r;
  }
  if (arg != nullptr && key == rm::kRmFreeRequest) {
    const int r = free_object(arg);
    if (r != -2) return r;
  }
  if (arg != nullptr && key == rm::kXferRequest) {
    rm::IoctlXfer xfer;
    std::memcpy(&xfer, arg, sizeof xfer);
    if (xfer.cmd == rm::kEscRmControl && xfer.size == sizeof(rm::ControlParams) && xfer.ptr != 0)
      return answer(reinterpret_cast<void*>(static_cast<uintptr_t>(xfer.ptr)));
  }
  return next_ioctl(fd, request, arg);
}

}  // extern "C"
