// Generated from hooked_symbols.def: the symbol enum, each symbol's ABI type, the table of
// names and hook addresses, and the real driver pointers.
#pragma once

#include <atomic>
#include <cstddef>

#include "hook/base/cuda_api.h"
#include "hook/base/libc_api.h"

namespace cuslice {

enum class Library : unsigned char { kCuda, kNvml, kLibc };

enum class Sym : int {
#define CUSLICE_CUDA_HOOK(name, pfn, version) name,
#define CUSLICE_NVML_HOOK(name, pfn) name,
#define CUSLICE_LIBC_HOOK(name, pfn) name,
#include "hook/base/hooked_symbols.def"
};

inline constexpr int kHookCount = 0
#define CUSLICE_CUDA_HOOK(name, pfn, version) +1
#define CUSLICE_NVML_HOOK(name, pfn) +1
#define CUSLICE_LIBC_HOOK(name, pfn) +1
#include "hook/base/hooked_symbols.def"
    ;

struct HookEntry {
  const char* name;   // exact exported name
  Library library;
  int cuda_version;   // version at which cuGetProcAddress hands out this ABI (0 for NVML, libc)
  void* hook;         // our definition of `name`
};

// Indexed by Sym.
extern const HookEntry kHooks[kHookCount];

// The hook registered under an exact exported name, or nullptr. Binary search; no
// allocation (used inside dlsym).
const HookEntry* find_hook(const char* name);

// The hook whose real driver function is `real_fn`, or nullptr. Used to route the pointers
// cuGetProcAddress returns: the driver picks the exact ABI, we substitute the hook of that
// exact symbol, so a wrong-ABI substitution cannot happen.
void* hook_for_real(void* real_fn);

template <Sym S>
struct SymTraits;
#define CUSLICE_CUDA_HOOK(name, pfn, version)   \
  template <>                                   \
  struct SymTraits<Sym::name> {                 \
    using Fn = pfn;                             \
    static constexpr Library kLibrary = Library::kCuda; \
  };
#define CUSLICE_NVML_HOOK(name, pfn)            \
  template <>                                   \
  struct SymTraits<Sym::name> {                 \
    using Fn = pfn;                             \
    static constexpr Library kLibrary = Library::kNvml; \
  };
#define CUSLICE_LIBC_HOOK(name, pfn)            \
  template <>                                   \
  struct SymTraits<Sym::name> {                 \
    using Fn = pfn;                             \
    static constexpr Library kLibrary = Library::kLibc; \
  };
#include "hook/base/hooked_symbols.def"

// Real function pointers, filled once by driver.cpp (CUDA at first use of any hook, NVML at
// first use of an NVML hook, each libc function at its own first call); nullptr where the
// installed driver lacks the symbol.
extern void* g_real[kHookCount];

}  // namespace cuslice
