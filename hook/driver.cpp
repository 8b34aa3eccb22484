#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>

#include "glibc_dl.h"
#include "log.h"
#include "quota.h"
#include "scheduler_link.h"
#include "settings.h"

namespace cuslice {
void reset_context_counts();  // context_hooks.cpp

namespace detail {
std::atomic<bool> g_cuda_ready{false};
std::atomic<bool> g_nvml_ready{false};
}  // namespace detail

namespace {

pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;
void* g_cuda = nullptr;
void* g_nvml = nullptr;
bool g_settings_ok = false;
bool g_refused = false;  // settings unreadable or no tenant: written in the once-block only
// dlopen runs the driver's constructors; if one of them reaches a hook on this thread, that
// hook must not wait on the once-block it is already inside.
thread_local bool t_loading = false;

void resolve(Library lib, void* handle) {
  for (int i = 0; i < kHookCount; ++i)
    if (kHooks[i].library == lib) g_real[i] = glibc_dlsym(handle, kHooks[i].name);
}

void on_fork_child() {
  quota::reset_after_fork();
  reset_context_counts();
  scheduler_link::after_fork_child();
}

void load_cuda() {
  t_loading = true;
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
  __atomic_store_n(&g_cuda, dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), __ATOMIC_RELEASE);
  if (g_cuda == nullptr) {
    CUSLICE_LOG(kWarn, "cannot load libcuda.so.1: %s", dlerror());
    t_loading = false;
    return;
  }
  resolve(Library::kCuda, g_cuda);
  pthread_atfork(nullptr, nullptr, &on_fork_child);
  if (!scheduler_link::start()) {  // the scheduler has no tenant for this process
    g_refused = true;
    t_loading = false;
    return;
  }
  CUSLICE_LOG(kDebug, "driver loaded, %d hooks", kHookCount);
  t_loading = false;
  detail::g_cuda_ready.store(true, std::memory_order_release);
}

void load_nvml() {
  if (!cuda_ready() && !g_settings_ok) return;  // invalid settings: NVML fails closed too
  g_nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g_nvml == nullptr) return;
  resolve(Library::kNvml, g_nvml);
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

void* resolve_next(int index) {
  // glibc's dlsym is called from here, inside libcuslice.so, so RTLD_NEXT means "after the
  // hook" (another preloaded interposer, else libc). Threads that race store the same value.
  void* fn = resolve_glibc_dl() ? glibc_dlsym(RTLD_NEXT, kHooks[index].name) : nullptr;
  if (fn == kHooks[index].hook) fn = nullptr;  // never ourselves
  if (fn != nullptr) __atomic_store_n(&g_real[index], fn, __ATOMIC_RELEASE);
  return fn;
}

}  // namespace detail

bool cuda_refused() {
  if (t_loading) return true;
  // Written inside the once-block; whoever calls this after cuda_ready() returned has
  // synchronised with it through pthread_once.
  return g_refused;
}

CUresult unavailable_result() {
  // Loaded but without this symbol (an older driver) versus not loaded / refused.
  return detail::g_cuda_ready.load(std::memory_order_acquire) ? CUDA_ERROR_NOT_SUPPORTED
                                                              : CUDA_ERROR_NOT_INITIALIZED;
}

void* cuda_library() { return cuda_ready() ? g_cuda : nullptr; }
void* nvml_library() { return nvml_ready() ? g_nvml : nullptr; }

void* cuda_symbol(const char* name) {
  // Once dlopen returned, the handle serves lookups even while initialisation (scheduler
  // registration, the monitor's start) is still running on this thread.
  void* h = __atomic_load_n(&g_cuda, __ATOMIC_ACQUIRE);
  if (h == nullptr) h = cuda_library();
  return h ? glibc_dlsym(h, name) : nullptr;
}

void* nvml_symbol(const char* name) {
  void* h = nvml_library();
  return h ? glibc_dlsym(h, name) : nullptr;
}

}  // namespace cuslice
