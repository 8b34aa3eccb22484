// The table of real functions and the library handles (driver.h). May call symbols,
// glibc_dl, settings and log; loading order and start-up are startup.cpp's.
#include "hook/driver/driver.h"

#include <dlfcn.h>

#include "hook/base/glibc_dl.h"

namespace cuslice {

namespace detail {
std::atomic<bool> g_cuda_ready{false};
std::atomic<bool> g_nvml_ready{false};
}  // namespace detail

namespace {

void* g_cuda = nullptr;
void* g_nvml = nullptr;

void resolve(Library lib, void* handle) {
  for (int i = 0; i < kHookCount; ++i)
    if (kHooks[i].library == lib) g_real[i] = glibc_dlsym(handle, kHooks[i].name);
}

}  // namespace

namespace detail {

void* open_library(Library lib) {
  const bool cuda = lib == Library::kCuda;
  void* h = dlopen(cuda ? "libcuda.so.1" : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  // Published before the table is resolved: cuda_symbol() serves lookups from here on, even
  // while the rest of initialisation runs on this thread.
  __atomic_store_n(cuda ? &g_cuda : &g_nvml, h, __ATOMIC_RELEASE);
  if (h != nullptr) resolve(lib, h);
  return h;
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
