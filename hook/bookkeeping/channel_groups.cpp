// The channel-group table and the time-slice controls (channel_groups.h).
//
// A group is named by its RM client and handle, and its controls go to the file descriptor
// its allocation came through (libcuda's /dev/nvidiactl), checked before each use to still be
// the same character device: a descriptor the application closed and reused for something
// else is never sent a control.
#include "hook/bookkeeping/channel_groups.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

#include "hook/base/fork_child.h"
#include "hook/base/nvidia_rm_abi.h"
#include "hook/driver/driver.h"

namespace cuslice::channel_groups {
namespace {

constexpr int kMaxGroups = 64;  // a context has a few; a process a few contexts

struct Group {
  std::atomic<uint64_t> key{0};  // client << 32 | handle; 0: free
  int fd = -1;
  dev_t rdev = 0;
  uint64_t driver_us = 0;   // the slice the driver set (0: not known yet)
  uint64_t applied_us = 0;  // the slice cuslice set (0: none, the driver's stands)
  bool refused = false;     // the kernel refused a control: leave the group alone
};

Group g_groups[kMaxGroups];
std::atomic<int> g_count{0};
std::atomic<uint64_t> g_target{0};
std::mutex g_mutex;

constexpr uint64_t key_of(uint32_t client, uint32_t handle) { return uint64_t{client} << 32 | handle; }

bool same_device(const Group& g) {
  struct stat st {};
  return fstat(g.fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == g.rdev;
}

// One control on the group; true when the kernel answered NV_OK. Sent to the next ioctl, not
// through the hook's own, so it is not taken for the application's.
bool control(const Group& g, uint32_t cmd, rm::TimesliceParams& params) {
  if (!same_device(g)) return false;
  const uint64_t key = g.key.load(std::memory_order_relaxed);
  rm::ControlParams c{};
  c.hClient = static_cast<uint32_t>(key >> 32);
  c.hObject = static_cast<uint32_t>(key);
  c.cmd = cmd;
  c.params = reinterpret_cast<uintptr_t>(&params);
  c.paramsSize = sizeof params;
  const int saved_errno = errno;
  const PFN_ioctl next = real<Sym::ioctl>();
  const unsigned long request = _IOWR(rm::kIoctlMagic, rm::kEscRmControl, rm::ControlParams);
  const int r = next != nullptr ? next(g.fd, request, &c) : static_cast<int>(syscall(SYS_ioctl, g.fd, request, &c));
  errno = saved_errno;
  return r == 0 && c.status == rm::kOk;
}

// Under g_mutex: gives the group the target slice (or back the driver's).
void apply_target_slice(Group& g) {
  if (g.refused) return;
  const uint64_t target = g_target.load(std::memory_order_relaxed);
  if (target != 0 && g.driver_us == 0) {
    rm::TimesliceParams now{};
    if (!control(g, rm::kCmdGetTimeslice, now) || now.timesliceUs == 0) {
      g.refused = true;
      return;
    }
    g.driver_us = now.timesliceUs;
  }
  const uint64_t want = target != 0 ? target : g.driver_us;
  const uint64_t have = g.applied_us != 0 ? g.applied_us : g.driver_us;
  if (want == 0 || want == have) return;
  rm::TimesliceParams p{want};
  if (!control(g, rm::kCmdSetTimeslice, p)) {
    g.refused = true;
    return;
  }
  g.applied_us = target != 0 ? target : 0;
}

Group* find(uint64_t key) {
  for (Group& g : g_groups)
    if (g.key.load(std::memory_order_relaxed) == key) return &g;
  return nullptr;
}

}  // namespace

void allocated(int fd, uint32_t client, uint32_t group) {
  struct stat st {};
  if (group == 0 || fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  const uint64_t key = key_of(client, group);
  Group* g = find(key);
  if (g == nullptr) g = find(0);
  if (g == nullptr) return;  // more groups than any process has: the rest keep the driver's slice
  if (g->key.load(std::memory_order_relaxed) == 0) g_count.fetch_add(1, std::memory_order_relaxed);
  g->fd = fd;
  g->rdev = st.st_rdev;
  g->driver_us = g->applied_us = 0;
  g->refused = false;
  g->key.store(key, std::memory_order_release);
  apply_target_slice(*g);
}

void freed(uint32_t client, uint32_t object) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  // A free of the client itself (hRoot == hObjectOld) frees all its groups.
  const auto gone = [client, object](uint64_t k) {
    return k != 0 && (k == key_of(client, object) || (client == object && static_cast<uint32_t>(k >> 32) == client));
  };
  bool ours = false;
  for (const Group& g : g_groups) ours = ours || gone(g.key.load(std::memory_order_relaxed));
  if (!ours) return;  // most frees are of other objects: no lock
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Group& g : g_groups)
    if (gone(g.key.load(std::memory_order_relaxed))) {
      g.key.store(0, std::memory_order_release);
      g_count.fetch_sub(1, std::memory_order_relaxed);
    }
}

void driver_set(uint32_t client, uint32_t group, uint64_t us) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  Group* g = find(key_of(client, group));
  if (g == nullptr) return;
  g->driver_us = us;
  g->applied_us = 0;  // the driver's value stands now
  apply_target_slice(*g);
}

void apply(uint64_t us) {
  if (g_target.load(std::memory_order_relaxed) == us) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_target.store(us, std::memory_order_relaxed);
  for (Group& g : g_groups)
    if (g.key.load(std::memory_order_relaxed) != 0) apply_target_slice(g);
}

bool verify(uint64_t us) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (us == 0 || g_target.load(std::memory_order_relaxed) != us) return false;
  bool any = false, all = true;
  for (Group& g : g_groups) {
    if (g.key.load(std::memory_order_relaxed) == 0) continue;
    any = true;
    if (g.refused) {
      all = false;
      continue;
    }
    rm::TimesliceParams now{};
    if (!control(g, rm::kCmdGetTimeslice, now)) {
      g.refused = true;
      all = false;
    } else if (now.timesliceUs != us) {
      g.applied_us = now.timesliceUs;  // not what cuslice set: apply_target_slice() sets it again
      apply_target_slice(g);
      all = false;
    }
  }
  return any && all;
}

Counts counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  Counts c;
  for (const Group& g : g_groups) {
    if (g.key.load(std::memory_order_relaxed) == 0) continue;
    ++c.groups;
    if (g.applied_us != 0) ++c.shortened;
    if (g.refused) ++c.refused;
  }
  return c;
}

void after_fork_child() {
  // The parent's groups belong to its RM clients: the child leaves them alone.
  renew_in_child(g_mutex);
  for (Group& g : g_groups) renew_in_child(g);
  renew_in_child(g_count);
  renew_in_child(g_target);
}

}  // namespace cuslice::channel_groups
