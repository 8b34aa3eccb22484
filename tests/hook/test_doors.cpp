// Every door to the driver leads through the hook: exported symbols (this binary links the
// fake libcuda directly, so its calls bind through the PLT), dlsym on any handle, and
// cuGetProcAddress as the CUDA runtime uses it.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <set>
#include <string>

#include "tests/fake_driver/runtime_replay.h"
#include "tests/hook/hook_test_support.h"

using namespace hook_test;

extern "C" char probe_which();  // rtld_probe_a.c: asks dlsym(RTLD_NEXT, "probe_symbol")

namespace {

const std::set<std::string>& hooked_names() {
  static const std::set<std::string> names = {
#define CUSLICE_CUDA_HOOK(name, pfn, version) #name,
#define CUSLICE_NVML_HOOK(name, pfn) #name,
#include "hook/base/hooked_symbols.def"
  };
  return names;
}

TEST(Doors, RuntimeLookupSequenceGetsHooksForExactlyTheHookedSymbols) {
  runtime_replay::Replay r = runtime_replay::replay();
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(in_hook(r.entry_point)) << "dlsym(libcuda, cuGetProcAddress_v2)";
  EXPECT_TRUE(in_hook(r.self_lookup)) << "cuGetProcAddress asked for itself";
  ASSERT_FALSE(r.lookups.empty());
  for (const auto& l : r.lookups) {
    SCOPED_TRACE(std::string(l.query.symbol) + " -> " + l.query.exact_name);
    ASSERT_EQ(l.result, CUDA_SUCCESS);
    ASSERT_NE(l.pfn, nullptr);
    if (hooked_names().count(l.query.exact_name))
      EXPECT_TRUE(in_hook(l.pfn)) << library_of(l.pfn);
    else
      EXPECT_EQ(library_of(l.pfn).rfind("libcuda", 0), 0u) << library_of(l.pfn);
  }
}

TEST(Doors, PerThreadAndLegacyStreamVariantsStayDistinct) {
  runtime_replay::Replay r = runtime_replay::replay();
  ASSERT_TRUE(r.ok()) << r.error;
  auto get = reinterpret_cast<PFN_cuGetProcAddress_v12000>(r.self_lookup);
  void* legacy = nullptr;
  void* per_thread = nullptr;
  CUdriverProcAddressQueryResult st;
  ASSERT_EQ(get("cuMemAllocAsync", &legacy, 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st), CUDA_SUCCESS);
  ASSERT_EQ(get("cuMemAllocAsync", &per_thread, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
            CUDA_SUCCESS);
  EXPECT_TRUE(in_hook(legacy));
  EXPECT_TRUE(in_hook(per_thread));
  EXPECT_NE(legacy, per_thread);
  EXPECT_EQ(legacy, dlsym(RTLD_DEFAULT, "cuMemAllocAsync"));
  EXPECT_EQ(per_thread, dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz"));
  // An ABI chosen by version: the legacy 32-bit cuMemAlloc is not hooked and must not be
  // replaced by the 64-bit hook.
  void* old_abi = nullptr;
  ASSERT_EQ(get("cuMemAlloc", &old_abi, 2000, 0, &st), CUDA_SUCCESS);
  ASSERT_NE(old_abi, nullptr);
  EXPECT_FALSE(in_hook(old_abi));
  void* ctx_v4 = nullptr;
  ASSERT_EQ(get("cuCtxCreate", &ctx_v4, 12050, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(ctx_v4, reinterpret_cast<void*>(&cuCtxCreate_v4));
}

TEST(Doors, DriverAnswersArePassedThroughUnchanged) {
  runtime_replay::Replay r = runtime_replay::replay();
  ASSERT_TRUE(r.ok()) << r.error;
  auto get = reinterpret_cast<PFN_cuGetProcAddress_v12000>(r.self_lookup);
  void* p = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(get("cuNoSuchFunction", &p, 13000, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  p = reinterpret_cast<void*>(1);
  EXPECT_EQ(get("cuLaunchKernelEx", &p, 11050, 0, &st), CUDA_SUCCESS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(get("cuMemAlloc", &p, 99999, 0, &st), CUDA_ERROR_INVALID_VALUE);
  // The 4-argument entry point routes the same way.
  void* four = dlsym(r.library, "cuGetProcAddress");
  ASSERT_TRUE(in_hook(four));
  void* q = nullptr;
  ASSERT_EQ(reinterpret_cast<PFN_cuGetProcAddress_v11030>(four)("cuMemFree", &q, 3020, 0), CUDA_SUCCESS);
  EXPECT_EQ(q, reinterpret_cast<void*>(&cuMemFree_v2));
}

TEST(Doors, DlsymHandsOutHooksOnEveryHandle) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(in_hook(dlsym(cuda, "cuMemAlloc_v2")));
  EXPECT_TRUE(in_hook(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")));
  EXPECT_TRUE(in_hook(dlsym(RTLD_NEXT, "cuMemAlloc_v2")));  // no one-line escape
  // dlvsym too; on a real handle it keeps the driver's answer (its names carry no version,
  // so a version request finds nothing there).
  EXPECT_TRUE(in_hook(dlvsym(RTLD_NEXT, "cuMemFree_v2", "GLIBC_2.2.5")));
  EXPECT_EQ(dlvsym(cuda, "cuMemFree_v2", "NO_SUCH_VERSION"), nullptr);
  // Not hooked: straight to the driver. Not there: not found.
  EXPECT_EQ(library_of(dlsym(cuda, "cuStreamSynchronize")).rfind("libcuda", 0), 0u);
  EXPECT_EQ(dlsym(cuda, "cuNoSuchFunction"), nullptr);
  EXPECT_NE(dlerror(), nullptr);
  // A library without the symbol keeps saying so, hooked name or not.
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  ASSERT_NE(libm, nullptr);
  EXPECT_EQ(dlsym(libm, "cuMemAlloc_v2"), nullptr);
  EXPECT_NE(dlsym(libm, "cos"), nullptr);
  // The exported-symbol door: this binary's own calls.
  EXPECT_TRUE(in_hook(reinterpret_cast<void*>(&cuMemAlloc_v2)));
}

TEST(Doors, OtherLibrariesKeepTheirRtldNext) {
  // rtld_probe_a.so asks dlsym(RTLD_NEXT, "probe_symbol"): the next definition after A is
  // B's. A dlsym wrapper that called glibc instead of jumping would make itself the caller
  // and get the wrong answer.
  EXPECT_EQ(probe_which(), 'B');
  EXPECT_NE(dlsym(RTLD_NEXT, "strlen"), nullptr);
  // The next definition after this binary: libc's, or in a sanitized build the sanitizer
  // runtime's, preloaded before the hook (libasan.so, libtsan.so).
  const std::string next = library_of(dlsym(RTLD_NEXT, "strlen"));
  EXPECT_TRUE(next == "libc.so.6" || next == "libasan.so" || next == "libtsan.so") << next;
}

}  // namespace
