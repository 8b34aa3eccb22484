// The second door: dlsym/dlvsym. PyTorch, JAX/XLA, CuPy, Triton, cuBLAS and nvidia-smi find
// driver and NVML entry points by dlsym on their own handle, which never searches a preloaded
// library. The trampolines (dlsym_trampoline.S) ask here first.
#include <dlfcn.h>

#include "hook/base/glibc_dl.h"
#include "hook/base/symbols.h"

namespace cuslice {
namespace {

bool may_be_ours(const char* name) {
  return name != nullptr && ((name[0] == 'c' && name[1] == 'u') ||
                             (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l'));
}

// The hook for `name` if the caller's lookup would find a driver symbol, else nullptr (the
// trampoline then lets glibc answer, with the caller's own RTLD_NEXT semantics and dlerror).
void* intercept(void* handle, const char* name, const char* version) {
  resolve_glibc_dl();
  if (!may_be_ours(name)) return nullptr;
  const HookEntry* e = find_hook(name);
  if (e == nullptr) return nullptr;
  // Every handle gets the hook, RTLD_DEFAULT and RTLD_NEXT included: otherwise
  // dlsym(RTLD_NEXT, "cuMemAlloc_v2") would be a one-line escape from the quota. A real
  // handle that does not provide the symbol keeps answering "not found".
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) {
    void* real = version ? glibc_dlvsym(handle, name, version) : glibc_dlsym(handle, name);
    if (real == nullptr) return nullptr;
  }
  return e->hook;
}

}  // namespace
}  // namespace cuslice

extern "C" __attribute__((visibility("hidden"))) void* cuslice_dlsym_intercept(void* handle,
                                                                              const char* name) {
  return cuslice::intercept(handle, name, nullptr);
}

extern "C" __attribute__((visibility("hidden"))) void* cuslice_dlvsym_intercept(
    void* handle, const char* name, const char* version) {
  return cuslice::intercept(handle, name, version);
}
