// The real driver behind the hooks: the table of real functions (g_real, from
// hooked_symbols.def) and the handles of libcuda.so.1 and libnvidia-ml.so.1. libc hooks (ioctl)
// are not tied to the driver: their real function is the next definition after the hook
// (RTLD_NEXT), resolved at their own first call.
//
// Hot paths call real<Sym::X>(): one acquire load of a ready flag plus the pointer load (for
// a libc hook, the pointer load alone).
//
// The lowest layer of the hook: may call symbols, glibc_dl, settings and log, nothing else.
// When the libraries are loaded, and what starts after them (the scheduler link, the
// monitor), is startup.cpp's: it owns the once-blocks declared here (load_cuda_slow,
// load_nvml_slow, cuda_refused), loads the libraries with open_library() and then sets the
// ready flags. See README.md for the layers.
#pragma once

#include <atomic>

#include "hook/base/symbols.h"

namespace cuslice {

namespace detail {
// Set (release) by startup.cpp once a library is loaded and the hook may use it.
extern std::atomic<bool> g_cuda_ready;
extern std::atomic<bool> g_nvml_ready;
// The once-blocks (startup.cpp): load and start on the first call, false while they run on
// this thread or when loading failed.
bool load_cuda_slow();
bool load_nvml_slow();
void* resolve_next(int index);
// Loads the library (libcuda.so.1 or libnvidia-ml.so.1) and resolves the table's entries for
// it; startup.cpp only, inside its once-block. nullptr: it cannot be loaded (dlerror() says
// why).
void* open_library(Library lib);
}  // namespace detail

// True once libcuda.so.1 is loaded, its hooked symbols resolved and the settings valid.
// False when the driver cannot be loaded or the settings are invalid (fail closed).
inline bool cuda_ready() {
  return detail::g_cuda_ready.load(std::memory_order_acquire) || detail::load_cuda_slow();
}

inline bool nvml_ready() {
  return detail::g_nvml_ready.load(std::memory_order_acquire) || detail::load_nvml_slow();
}

// True when the hook refused to start (CUDA initialisation fails closed): the settings are
// unreadable or the scheduler has no tenant for this process; also while the hook is starting
// on the calling thread. False when it is ready, or inert because libcuda.so.1 (or glibc's
// dlsym) cannot be found.
bool cuda_refused();

// The driver's own function for S, or nullptr if it could not be loaded or lacks S. For a libc
// hook, the next definition of its name after libcuslice.so (nullptr only if none is found).
template <Sym S>
inline typename SymTraits<S>::Fn real() {
  using Fn = typename SymTraits<S>::Fn;
  constexpr int index = static_cast<int>(S);
  if constexpr (SymTraits<S>::kLibrary == Library::kLibc) {
    void* fn = __atomic_load_n(&g_real[index], __ATOMIC_ACQUIRE);
    return reinterpret_cast<Fn>(fn != nullptr ? fn : detail::resolve_next(index));
  } else {
    const bool ready = SymTraits<S>::kLibrary == Library::kCuda ? cuda_ready() : nvml_ready();
    if (!ready) return nullptr;
    return reinterpret_cast<Fn>(g_real[index]);
  }
}

// What a CUDA hook returns when real<S>() is nullptr.
CUresult unavailable_result();

// The loaded driver library handle (for lookups of unhooked helpers), or nullptr.
void* cuda_library();
void* nvml_library();

// Looks up an unhooked driver function by exact name (slow: not for hot paths).
void* cuda_symbol(const char* name);
void* nvml_symbol(const char* name);
template <typename Fn>
Fn cuda_function(const char* name) {
  return reinterpret_cast<Fn>(cuda_symbol(name));
}

}  // namespace cuslice
