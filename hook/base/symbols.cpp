#include "hook/base/symbols.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace cuslice {

// Each hook's definition must have exactly its ABI typedef's type.
#define CUSLICE_CUDA_HOOK(name, pfn, version)                        \
  static_assert(std::is_same_v<decltype(&::name), pfn>,              \
                #name " is not defined with the ABI of " #pfn);
#define CUSLICE_NVML_HOOK(name, pfn)                                 \
  static_assert(std::is_same_v<decltype(&::name), pfn>,              \
                #name " is not defined with the ABI of " #pfn);
#define CUSLICE_LIBC_HOOK(name, pfn)                                 \
  static_assert(std::is_same_v<decltype(&::name), pfn>,              \
                #name " is not defined with the ABI of " #pfn);
#include "hook/base/hooked_symbols.def"

const HookEntry kHooks[kHookCount] = {
#define CUSLICE_CUDA_HOOK(name, pfn, version) \
  {#name, Library::kCuda, version, reinterpret_cast<void*>(&::name)},
#define CUSLICE_NVML_HOOK(name, pfn) {#name, Library::kNvml, 0, reinterpret_cast<void*>(&::name)},
#define CUSLICE_LIBC_HOOK(name, pfn) {#name, Library::kLibc, 0, reinterpret_cast<void*>(&::name)},
#include "hook/base/hooked_symbols.def"
};

void* g_real[kHookCount];

namespace {

struct NameIndex {
  std::string_view name;
  int index;
};

constexpr std::array<NameIndex, kHookCount> kByName = [] {
  std::array<NameIndex, kHookCount> a{};
  int i = 0;
#define CUSLICE_CUDA_HOOK(name, pfn, version) a[i] = {#name, i}, ++i;
#define CUSLICE_NVML_HOOK(name, pfn) a[i] = {#name, i}, ++i;
#define CUSLICE_LIBC_HOOK(name, pfn) a[i] = {#name, i}, ++i;
#include "hook/base/hooked_symbols.def"
  std::sort(a.begin(), a.end(), [](const NameIndex& x, const NameIndex& y) { return x.name < y.name; });
  return a;
}();

static_assert(std::adjacent_find(kByName.begin(), kByName.end(),
                                 [](const NameIndex& x, const NameIndex& y) {
                                   return x.name == y.name;
                                 }) == kByName.end(),
              "a symbol is listed twice in hooked_symbols.def");

}  // namespace

const HookEntry* find_hook(const char* name) {
  std::string_view key(name);
  auto it = std::lower_bound(kByName.begin(), kByName.end(), key,
                             [](const NameIndex& e, std::string_view k) { return e.name < k; });
  if (it == kByName.end() || it->name != key) return nullptr;
  return &kHooks[it->index];
}

void* hook_for_real(void* real_fn) {
  if (real_fn == nullptr) return nullptr;
  for (int i = 0; i < kHookCount; ++i)
    if (g_real[i] == real_fn) return kHooks[i].hook;
  return nullptr;
}

}  // namespace cuslice
