#include "tests/fake_driver/runtime_replay.h"

#include <dlfcn.h>

namespace runtime_replay {
namespace {

constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

constexpr Query kDefaultQueries[] = {
    {"cuInit", 2000, kLegacy, "cuInit"},
    {"cuDevicePrimaryCtxRetain", 7000, kLegacy, "cuDevicePrimaryCtxRetain"},
    {"cuCtxCreate", 12050, kLegacy, "cuCtxCreate_v4"},
    {"cuMemGetInfo", 3020, kLegacy, "cuMemGetInfo_v2"},
    {"cuDeviceTotalMem", 3020, kLegacy, "cuDeviceTotalMem_v2"},
    {"cuMemAlloc", 3020, kLegacy, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 3020, kLegacy, "cuMemAllocPitch_v2"},
    {"cuMemFree", 3020, kLegacy, "cuMemFree_v2"},
    {"cuMemAllocManaged", 6000, kLegacy, "cuMemAllocManaged"},
    {"cuMemAllocAsync", 11020, kLegacy, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 11020, kPerThread, "cuMemAllocAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 11020, kLegacy, "cuMemAllocFromPoolAsync"},
    {"cuMemAllocFromPoolAsync", 11020, kPerThread, "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemFreeAsync", 11020, kLegacy, "cuMemFreeAsync"},
    {"cuMemFreeAsync", 11020, kPerThread, "cuMemFreeAsync_ptsz"},
    {"cuMemPoolCreate", 11020, kLegacy, "cuMemPoolCreate"},
    {"cuMemPoolTrimTo", 11020, kLegacy, "cuMemPoolTrimTo"},
    {"cuMemCreate", 10020, kLegacy, "cuMemCreate"},
    {"cuMemRelease", 10020, kLegacy, "cuMemRelease"},
    {"cuArrayCreate", 3020, kLegacy, "cuArrayCreate_v2"},
    {"cuArray3DCreate", 3020, kLegacy, "cuArray3DCreate_v2"},
    {"cuMipmappedArrayCreate", 5000, kLegacy, "cuMipmappedArrayCreate"},
    {"cuGraphAddMemAllocNode", 11040, kLegacy, "cuGraphAddMemAllocNode"},
    {"cuIpcOpenMemHandle", 11000, kLegacy, "cuIpcOpenMemHandle_v2"},
    {"cuLaunchKernel", 4000, kLegacy, "cuLaunchKernel"},
    {"cuLaunchKernel", 7000, kPerThread, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 11060, kLegacy, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 11060, kPerThread, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 9000, kLegacy, "cuLaunchCooperativeKernel"},
    {"cuLaunchCooperativeKernel", 9000, kPerThread, "cuLaunchCooperativeKernel_ptsz"},
    {"cuGraphLaunch", 10000, kLegacy, "cuGraphLaunch"},
    {"cuGraphLaunch", 10000, kPerThread, "cuGraphLaunch_ptsz"},
};

}  // namespace

std::span<const Query> default_queries() { return kDefaultQueries; }

Replay replay(std::span<const Query> queries, const char* library) {
  Replay result;
  result.library = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (result.library == nullptr) {
    const char* why = dlerror();
    result.error = std::string("dlopen: ") + (why != nullptr ? why : library);
    return result;
  }
  result.entry_point = dlsym(result.library, "cuGetProcAddress_v2");
  if (result.entry_point == nullptr) {
    result.error = "dlsym(cuGetProcAddress_v2) returned null";
    return result;
  }
  auto entry = reinterpret_cast<PFN_cuGetProcAddress_v12000>(result.entry_point);
  result.self_result = entry("cuGetProcAddress", &result.self_lookup, 12000, kLegacy,
                             &result.self_status);
  if (result.self_result != CUDA_SUCCESS || result.self_lookup == nullptr) {
    result.error = "cuGetProcAddress_v2 did not resolve cuGetProcAddress at 12000";
    return result;
  }
  auto lookup = reinterpret_cast<PFN_cuGetProcAddress_v12000>(result.self_lookup);
  for (const Query& query : queries) {
    Lookup& made = result.lookups.emplace_back();
    made.query = query;
    made.result = lookup(query.symbol, &made.pfn, query.cuda_version, query.flags, &made.status);
  }
  return result;
}

}  // namespace runtime_replay
