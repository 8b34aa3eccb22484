// The real driver behind the hooks: libcuda.so.1 and libnvidia-ml.so.1, loaded lazily on the
// first call of any hook (cuGetProcAddress may come before cuInit), once, thread-safely.
//
// Hot paths call real<Sym::X>(): one acquire load of a ready flag plus the pointer load.
#pragma once

#include <atomic>

#include "symbols.h"

namespace cuslice {

namespace detail {
extern std::atomic<bool> g_cuda_ready;
extern std::atomic<bool> g_nvml_ready;
bool load_cuda_slow();
bool load_nvml_slow();
}  // namespace detail

// True once libcuda.so.1 is loaded, its hooked symbols resolved and the settings valid.
// False when the driver cannot be loaded or the settings are invalid (fail closed).
inline bool cuda_ready() {
  return detail::g_cuda_ready.load(std::memory_order_acquire) || detail::load_cuda_slow();
}

inline bool nvml_ready() {
  return detail::g_nvml_ready.load(std::memory_order_acquire) || detail::load_nvml_slow();
}

// The driver's own function for S, or nullptr if it could not be loaded or lacks S.
template <Sym S>
inline typename SymTraits<S>::Fn real() {
  const bool ready = SymTraits<S>::kLibrary == Library::kCuda ? cuda_ready() : nvml_ready();
  if (!ready) return nullptr;
  return reinterpret_cast<typename SymTraits<S>::Fn>(g_real[static_cast<int>(S)]);
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
