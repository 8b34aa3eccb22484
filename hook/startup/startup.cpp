// How the hook starts, once, on the first call of any CUDA or NVML hook (cuGetProcAddress may
// come before cuInit), thread-safely: the settings, glibc's dlsym, libcuda.so.1 and its
// table, the fork handler, the scheduler link and the launch monitor; libnvidia-ml.so.1 the
// same way on the first NVML call. And the fork handler: what each layer forgets in the child.
//
// The one file above both the driver table and the layers it starts: it defines the
// once-blocks driver.h declares, and may call driver, glibc_dl, settings, log, quota,
// pool_accounting, scheduler_link, activity, the client and context_hooks' reset. Nothing
// calls it but driver.h's inline ready checks.
#include <dlfcn.h>
#include <pthread.h>

#include "hook/base/glibc_dl.h"
#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/bookkeeping/channel_groups.h"
#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/pool_accounting.h"
#include "hook/memory/quota.h"
#include "hook/monitor/activity.h"
#include "hook/movable/host_pool.h"
#include "hook/movable/movable_memory.h"
#include "hook/movable/mover.h"
#include "hook/movable/work_hold.h"

namespace cuslice {
void reset_context_counts();  // context_hooks.cpp

namespace {

pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
bool g_settings_ok = false;
bool g_refused = false;  // settings unreadable or no tenant: written in the once-block only
// dlopen runs the driver's constructors; if one of them reaches a hook on this thread, that
// hook must not wait on the once-block it is already inside.
thread_local bool t_loading = false;

// The child of fork() holds no device memory, no contexts, no registration and no queued
// work: every layer starts from nothing (each with renew_in_child(), fork_child.h). The child
// registers again, under its own pid, at its first CUDA call.
void on_fork_child() {
  quota::reset_after_fork();
  pool_accounting::reset_after_fork();
  reset_context_counts();
  client::after_fork_child();
  activity::after_fork_child();
  channel_groups::after_fork_child();
  work_hold::after_fork_child();
  movable::after_fork_child();
  host_pool::after_fork_child();
  mover::after_fork_child();
}

void load_cuda() {
  t_loading = true;
  // Before anything can charge: the ledger's slow paths measure and trim the pools.
  quota::set_pool_reserves({&pool_accounting::replace_precharges, &pool_accounting::trim});
  load_settings();
  const Settings& s = settings();
  if (!s.valid) {
    // The one line a user sees by default: a quota that cannot be read never means unlimited.
    CUSLICE_LOG(kError, "%s; CUDA initialisation refused", s.error);
    g_refused = true;
    t_loading = false;
    return;
  }
  g_settings_ok = true;
  if (!resolve_glibc_dl()) {
    CUSLICE_LOG(kError, "cannot find glibc's dlsym; the hook is inactive");
    t_loading = false;
    return;
  }
  if (detail::open_library(Library::kCuda) == nullptr) {
    CUSLICE_LOG(kWarn, "cannot load libcuda.so.1: %s", dlerror());
    t_loading = false;
    return;
  }
  pthread_atfork(nullptr, nullptr, &on_fork_child);
  if (!scheduler_link::start()) {  // the scheduler has no tenant for this process
    g_refused = true;
    t_loading = false;
    return;
  }
  // In a tenant (or asked for one): launches are gated, by the monitor's bound and token.
  if (scheduler_link::enabled()) activity::start();
  CUSLICE_LOG(kDebug, "driver loaded, %d hooks", kHookCount);
  t_loading = false;
  detail::g_cuda_ready.store(true, std::memory_order_release);
}

void load_nvml() {
  if (!cuda_ready() && !g_settings_ok) return;  // invalid settings: NVML fails closed too
  if (detail::open_library(Library::kNvml) == nullptr) return;
  detail::g_nvml_ready.store(true, std::memory_order_release);
}

}  // namespace

namespace detail {

bool load_cuda_slow() {
  if (t_loading) return false;
  pthread_once(&g_cuda_once, &load_cuda);
  return g_cuda_ready.load(std::memory_order_acquire);
}

bool load_nvml_slow() {
  if (t_loading) return false;
  pthread_once(&g_nvml_once, &load_nvml);
  return g_nvml_ready.load(std::memory_order_acquire);
}

}  // namespace detail

bool cuda_refused() {
  if (t_loading) return true;
  // Written inside the once-block; whoever calls this after cuda_ready() returned has
  // synchronised with it through pthread_once.
  return g_refused;
}

}  // namespace cuslice
