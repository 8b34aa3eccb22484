// probe: native facts about the CUDA driver that the hook's design depends on.
//
// Runs WITHOUT the hook. Each section prints a small table; tests/gpu/probe.sh runs it on the
// GPU machine and docs/evidence/probes/driver.md records what it printed there.
//
//   probe symbols EXPORTS_FILE   1. cuGetProcAddress_v2 pointer == dlsym(libcuda, exact name)?
//   probe memory                 2-5. context cost, granularity, pools, call costs, graphs
//   probe runtime                a static-cudart smoke (cudaMalloc, a launch) for door_probe
//
// Built by nvcc with the default static cudart and -lcuda (the driver is linked directly, so
// every cu* call here goes straight to libcuda.so.1; no hook is loaded).
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

const char* err_name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define CK(call)                                                                      \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      std::fprintf(stderr, "probe: %s:%d %s -> %s\n", __FILE__, __LINE__, #call,      \
                   err_name(r_));                                                     \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// ---- nvidia-smi and NVML views of this process ------------------------------------------------

// used_memory (MiB) nvidia-smi lists for `pid`, or -1 when the pid is not listed.
long smi_used_mib(pid_t pid) {
  FILE* f = popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits",
                  "r");
  if (!f) return -2;
  char line[256];
  long found = -1;
  while (std::fgets(line, sizeof line, f)) {
    long p = 0, m = 0;
    if (std::sscanf(line, "%ld, %ld", &p, &m) == 2 && p == pid) found = m;
  }
  pclose(f);
  return found;
}

// NVML, declared here (the toolkit ships no nvml.h on every machine); the v2/v3 process struct.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct Nvml {
  int (*get_mem_v2)(void*, NvmlMemoryV2*) = nullptr;
  bool ok = false;
  void* dev = nullptr;
  int (*get_procs)(void*, unsigned int*, NvmlProcessInfo*) = nullptr;
  int (*get_mem)(void*, NvmlMemory*) = nullptr;
};
Nvml g_nvml;

void nvml_open() {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!h) return;
  auto init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  g_nvml.get_procs = reinterpret_cast<decltype(g_nvml.get_procs)>(
      dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
  g_nvml.get_mem = reinterpret_cast<decltype(g_nvml.get_mem)>(dlsym(h, "nvmlDeviceGetMemoryInfo"));
  g_nvml.get_mem_v2 = reinterpret_cast<decltype(g_nvml.get_mem_v2)>(dlsym(h, "nvmlDeviceGetMemoryInfo_v2"));
  if (!init || !by_index || !g_nvml.get_procs || !g_nvml.get_mem) return;
  if (init() != 0 || by_index(0, &g_nvml.dev) != 0) return;
  g_nvml.ok = true;
}

// usedGpuMemory (MiB) NVML lists for `pid` from inside the process; -1 not listed, -2 no NVML.
long nvml_used_mib(pid_t pid) {
  if (!g_nvml.ok) return -2;
  NvmlProcessInfo infos[64];
  unsigned int n = 64;
  if (g_nvml.get_procs(g_nvml.dev, &n, infos) != 0) return -3;
  for (unsigned i = 0; i < n; ++i)
    if (infos[i].pid == static_cast<unsigned>(pid)) return static_cast<long>(infos[i].usedGpuMemory / kMiB);
  return -1;
}

double mem_used_gib_nvml() {
  NvmlMemory m{};
  if (!g_nvml.ok || g_nvml.get_mem(g_nvml.dev, &m) != 0) return -1;
  return static_cast<double>(m.used) / kGiB;
}

uint64_t free_bytes() {
  size_t f = 0, t = 0;
  CK(cuMemGetInfo(&f, &t));
  return f;
}

// One line: where we are, nvidia-smi / NVML per-pid usage, device free per cuMemGetInfo.
struct Snapshot {
  long smi, nvml;
  uint64_t free;
};
Snapshot snap() { return {smi_used_mib(getpid()), nvml_used_mib(getpid()), free_bytes()}; }
void print_snap(const char* what, const Snapshot& s, const Snapshot* base) {
  std::printf("  %-44s smi=%6ld MiB  nvml=%6ld MiB  free=%9.1f MiB", what, s.smi, s.nvml,
              static_cast<double>(s.free) / kMiB);
  if (base)
    std::printf("  | d_smi=%+ld MiB d_free=%+.2f MiB", s.smi - base->smi,
                (static_cast<double>(base->free) - static_cast<double>(s.free)) / kMiB);
  std::printf("\n");
}

// ---- 1. cuGetProcAddress vs dlsym ----------------------------------------------------------------

std::string base_name(std::string n) {
  for (const char* sfx : {"_ptsz", "_ptds"})
    if (n.size() > 5 && n.compare(n.size() - 5, 5, sfx) == 0) n.resize(n.size() - 5);
  size_t u = n.rfind("_v");
  if (u != std::string::npos && u + 2 < n.size() &&
      std::all_of(n.begin() + u + 2, n.end(), [](char c) { return c >= '0' && c <= '9'; }))
    n.resize(u);
  return n;
}

int run_symbols(const char* exports_file) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) { std::fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror()); return 1; }
  using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto gpa = reinterpret_cast<Gpa>(dlsym(lib, "cuGetProcAddress_v2"));
  CK(cuInit(0));
  int drv = 0;
  CK(cuDriverGetVersion(&drv));
  std::printf("driver CUDA version %d\n", drv);

  // Every exported name -> its real dlsym address; the reverse map (address -> names).
  std::vector<std::string> names;
  if (FILE* f = std::fopen(exports_file, "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      line[std::strcspn(line, "\r\n ")] = 0;
      if (line[0] == 'c' && line[1] == 'u') names.emplace_back(line);
    }
    std::fclose(f);
  }
  std::map<void*, std::vector<std::string>> by_addr;
  std::map<std::string, void*> addr_of;
  int missing = 0;
  for (auto& n : names) {
    void* p = dlsym(lib, n.c_str());
    if (!p) { ++missing; continue; }
    addr_of[n] = p;
    by_addr[p].push_back(n);
  }
  std::printf("exported cu* names in list: %zu, resolved by dlsym in the real driver: %zu, missing: %d\n",
              names.size(), addr_of.size(), missing);
  int alias_groups = 0;
  for (auto& [p, ns] : by_addr)
    if (ns.size() > 1) {
      ++alias_groups;
      std::printf("  ALIAS (same address): ");
      for (auto& n : ns) std::printf("%s ", n.c_str());
      std::printf("\n");
    }
  std::printf("address groups with more than one exported name: %d\n\n", alias_groups);

  auto who = [&](void* p) -> std::string {
    if (!p) return "NULL";
    auto it = by_addr.find(p);
    if (it == by_addr.end()) {
      Dl_info di{};
      char buf[160];
      if (dladdr(p, &di) && di.dli_sname)
        std::snprintf(buf, sizeof buf, "<not exported; dladdr: %s>", di.dli_sname);
      else
        std::snprintf(buf, sizeof buf, "<not exported: %p>", p);
      return buf;
    }
    std::string s;
    for (auto& n : it->second) s += (s.empty() ? "" : "=") + n;
    return s;
  };
  auto query = [&](const char* sym, int ver, cuuint64_t flags, CUresult* r,
                   CUdriverProcAddressQueryResult* st) {
    void* p = nullptr;
    *st = CU_GET_PROC_ADDRESS_SUCCESS;
    *r = gpa(sym, &p, ver, flags, st);
    return p;
  };

  // The table the brief asks for: base name queried at 13000 with flags 1 and 2 (and 0).
  struct Row { const char* base; const char* legacy; const char* ptsz; };
  const Row rows[] = {
      {"cuMemAlloc", "cuMemAlloc_v2", nullptr},
      {"cuMemFree", "cuMemFree_v2", nullptr},
      {"cuMemAllocAsync", "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
      {"cuMemFreeAsync", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
      {"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"},
      {"cuMemAllocManaged", "cuMemAllocManaged", nullptr},
      {"cuMemAllocPitch", "cuMemAllocPitch_v2", nullptr},
      {"cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel_ptsz"},
      {"cuLaunchKernelEx", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"},
      {"cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"},
      {"cuGraphLaunch", "cuGraphLaunch", "cuGraphLaunch_ptsz"},
      {"cuGraphInstantiate", "cuGraphInstantiateWithFlags", nullptr},
      {"cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz"},
      {"cuGraphAddMemAllocNode", "cuGraphAddMemAllocNode", nullptr},
      {"cuMemCreate", "cuMemCreate", nullptr},
      {"cuMemMap", "cuMemMap", nullptr},
      {"cuMemRelease", "cuMemRelease", nullptr},
      {"cuMemPoolCreate", "cuMemPoolCreate", nullptr},
      {"cuCtxCreate", "cuCtxCreate_v4", nullptr},
      {"cuCtxGetDevice", "cuCtxGetDevice", nullptr},
      {"cuGetProcAddress", "cuGetProcAddress_v2", nullptr},
      {"cuMemGetInfo", "cuMemGetInfo_v2", nullptr},
      {"cuDeviceTotalMem", "cuDeviceTotalMem_v2", nullptr},
      {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", nullptr},
      {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", nullptr},
      {"cuArrayCreate", "cuArrayCreate_v2", nullptr},
      {"cuArray3DCreate", "cuArray3DCreate_v2", nullptr},
      {"cuMipmappedArrayCreate", "cuMipmappedArrayCreate", nullptr},
      {"cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyAsync", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"},
      {"cuStreamSynchronize", "cuStreamSynchronize", "cuStreamSynchronize_ptsz"},
      {"cuStreamIsCapturing", "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz"},
      {"cuMemAdvise", "cuMemAdvise_v2", nullptr},
      {"cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v3_ptsz"},
      {"cuInit", "cuInit", nullptr},
  };
  std::printf("=== 1a. cuGetProcAddress_v2(base, &p, 13000, flags) vs dlsym(exact name) ===\n");
  std::printf("%-30s | %-5s | %-36s | %s\n", "base", "flags", "returned pointer == dlsym of", "matches expected exact name");
  int mism = 0;
  for (auto& r : rows) {
    for (cuuint64_t fl : {1ull, 2ull, 0ull}) {
      CUresult res;
      CUdriverProcAddressQueryResult st;
      void* p = query(r.base, 13000, fl, &res, &st);
      const char* expect = (fl == 2 && r.ptsz) ? r.ptsz : r.legacy;
      void* want = addr_of.count(expect) ? addr_of[expect] : dlsym(lib, expect);
      bool same = p && p == want;
      if (fl != 0 && !same) ++mism;
      std::printf("%-30s | %-5llu | %-36s | %s%s\n", r.base, (unsigned long long)fl, who(p).c_str(),
                  fl == 0 ? "(flags 0: " : "", (same ? (std::string("YES ") + expect) : (std::string("NO, expected ") + expect)).c_str());
      if (res != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS)
        std::printf("    (result %s, status %d)\n", err_name(res), (int)st);
    }
  }
  std::printf("mismatches among flags 1/2 rows: %d\n\n", mism);

  // 1b. The versions a runtime asks at.
  struct VRow { const char* base; int ver; };
  const VRow vrows[] = {
      {"cuMemAlloc", 2000}, {"cuMemAlloc", 3020}, {"cuMemGetInfo", 2000}, {"cuMemGetInfo", 3020},
      {"cuCtxCreate", 2000}, {"cuCtxCreate", 3020}, {"cuCtxCreate", 11040}, {"cuCtxCreate", 12050},
      {"cuCtxCreate", 13000}, {"cuGetProcAddress", 11030}, {"cuGetProcAddress", 12000},
      {"cuGraphInstantiate", 10000}, {"cuGraphInstantiate", 11000}, {"cuGraphInstantiate", 12000},
      {"cuStreamGetCaptureInfo", 10010}, {"cuStreamGetCaptureInfo", 11030}, {"cuStreamGetCaptureInfo", 12030},
      {"cuCtxGetDevice", 2000}, {"cuCtxGetDevice", 13000}, {"cuMemAdvise", 8000}, {"cuMemAdvise", 12020},
      {"cuDevicePrimaryCtxRelease", 7000}, {"cuDevicePrimaryCtxRelease", 11000},
      {"cuLaunchKernel", 4000}, {"cuLaunchKernelEx", 11060}, {"cuLaunchKernelEx", 11050},
      {"cuMemAllocAsync", 11020}, {"cuMemCreate", 10020}, {"cuDeviceTotalMem", 3020},
      {"cuNoSuchFunction", 13000}, {"cuMemAlloc", 99999}, {"cuMemAlloc_v2", 13000}, {"cuLaunchKernel_ptsz", 13000},
  };
  std::printf("=== 1b. version-dependent answers (flags 1; flags 2 where different) ===\n");
  for (auto& v : vrows) {
    CUresult r1, r2;
    CUdriverProcAddressQueryResult s1, s2;
    void* p1 = query(v.base, v.ver, 1, &r1, &s1);
    void* p2 = query(v.base, v.ver, 2, &r2, &s2);
    std::printf("%-26s @%-6d -> %-36s result=%s status=%d", v.base, v.ver, who(p1).c_str(), err_name(r1), (int)s1);
    if (p2 != p1) std::printf("   [flags 2 -> %s]", who(p2).c_str());
    std::printf("\n");
  }

  // 1c. Every exported base name at 13000, flags 1 and 2: is every returned pointer an export?
  std::printf("\n=== 1c. sweep: every distinct base name at 13000, flags 1 and 2 ===\n");
  std::map<std::string, int> bases;
  for (auto& [n, p] : addr_of) bases[base_name(n)] = 1;
  int found = 0, null_ptr = 0, not_export = 0, ptsz_twin = 0;
  for (auto& [b, one] : bases) {
    for (cuuint64_t fl : {1ull, 2ull}) {
      CUresult r;
      CUdriverProcAddressQueryResult st;
      void* p = query(b.c_str(), 13000, fl, &r, &st);
      if (!p) { ++null_ptr; std::printf("  NULL: %s flags %llu (result %s status %d)\n", b.c_str(), (unsigned long long)fl, err_name(r), (int)st); continue; }
      auto it = by_addr.find(p);
      if (it == by_addr.end()) { ++not_export; std::printf("  NOT AN EXPORT: %s flags %llu -> %s\n", b.c_str(), (unsigned long long)fl, who(p).c_str()); continue; }
      ++found;
      if (fl == 2) {
        for (auto& n : it->second)
          if (n.find("_pt") != std::string::npos) { ++ptsz_twin; break; }
      }
    }
  }
  std::printf("distinct base names: %zu; queries returning an exported address: %d, NULL: %d, non-exported: %d;"
              " flags-2 answers that are a _ptsz/_ptds export: %d\n",
              bases.size(), found, null_ptr, not_export, ptsz_twin);
  return 0;
}

// ---- 2-5. memory facts ----------------------------------------------------------------------------

template <class F>
double median_ns(F&& f, int batches = 100, int per_batch = 100) {
  std::vector<double> v;
  v.reserve(batches);
  for (int i = 0; i < 10 * per_batch; ++i) f();  // warm-up
  for (int b = 0; b < batches; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_batch; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    v.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / per_batch);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a) {
  cuuint64_t v = 0;
  CK(cuMemPoolGetAttribute(pool, a, &v));
  return v;
}
uint64_t graph_attr(CUdevice dev, CUgraphMem_attribute a) {
  cuuint64_t v = 0;
  CK(cuDeviceGetGraphMemAttribute(dev, a, &v));
  return v;
}

void alloc_series(const char* label, size_t bytes, int count) {
  Snapshot b = snap();
  std::vector<CUdeviceptr> ps(count);
  for (auto& p : ps) CK(cuMemAlloc(&p, bytes));
  Snapshot a = snap();
  char what[96];
  std::snprintf(what, sizeof what, "after %d x cuMemAlloc(%s)", count, label);
  print_snap(what, a, &b);
  std::vector<CUdeviceptr> sorted = ps;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> strides;
  for (size_t i = 1; i < sorted.size(); ++i) strides.push_back(sorted[i] - sorted[i - 1]);
  std::sort(strides.begin(), strides.end());
  CUdeviceptr base = 0;
  size_t range = 0;
  CK(cuMemGetAddressRange(&base, &range, ps[0]));
  std::printf("    address strides: min %llu, median %llu, max %llu bytes; cuMemGetAddressRange size %zu; "
              "per-allocation free-drop %.1f KiB\n",
              (unsigned long long)strides.front(), (unsigned long long)strides[strides.size() / 2],
              (unsigned long long)strides.back(), range,
              (static_cast<double>(b.free) - static_cast<double>(a.free)) / count / kKiB);
  for (auto p : ps) CK(cuMemFree(p));
  print_snap("  ...after freeing them", snap(), &b);
}

int run_memory() {
  const pid_t pid = getpid();
  nvml_open();
  std::printf("=== 2. context cost (pid %d; NVML in-process: %s) ===\n", (int)pid, g_nvml.ok ? "yes" : "NO");
  std::printf("  before cuInit: smi=%ld MiB nvml=%ld MiB (-1 = pid not listed)\n", smi_used_mib(pid), nvml_used_mib(pid));
  CK(cuInit(0));
  std::printf("  after cuInit:  smi=%ld MiB nvml=%ld MiB\n", smi_used_mib(pid), nvml_used_mib(pid));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  std::printf("  cuDeviceTotalMem %.1f MiB; device used per NVML %.2f GiB\n", (double)total / kMiB, mem_used_gib_nvml());
  CUcontext primary;
  CK(cuDevicePrimaryCtxRetain(&primary, dev));
  std::printf("  after cuDevicePrimaryCtxRetain (not current): smi=%ld MiB nvml=%ld MiB\n", smi_used_mib(pid), nvml_used_mib(pid));
  CK(cuCtxSetCurrent(primary));
  Snapshot s_primary = snap();
  print_snap("after primary ctx retain + set current", s_primary, nullptr);
  {
    CUcontext second;
    CK(cuCtxCreate(&second, nullptr, 0, dev));
    Snapshot s2 = snap();
    print_snap("after a second context (cuCtxCreate_v4)", s2, &s_primary);
    CK(cuCtxDestroy(second));
    CK(cuCtxSetCurrent(primary));
    print_snap("after destroying it", snap(), &s_primary);
  }

  std::printf("\n=== 3. granularity of cuMemAlloc ===\n");
  alloc_series("4 KiB", 4 * kKiB, 100);
  alloc_series("1 MiB", kMiB, 100);
  alloc_series("2 MiB", 2 * kMiB, 10);
  alloc_series("3 MiB", 3 * kMiB, 10);
  alloc_series("3 MiB+1", 3 * kMiB + 1, 10);
  alloc_series("64 MiB", 64 * kMiB, 4);
  for (size_t sz : {size_t(1), size_t(4 * kKiB), size_t(2 * kMiB + 1), size_t(3 * kMiB + 1)}) {
    CUdeviceptr p, base;
    size_t range;
    CK(cuMemAlloc(&p, sz));
    CK(cuMemGetAddressRange(&base, &range, p));
    std::printf("  cuMemGetAddressRange(cuMemAlloc(%zu)) -> base==ptr %s, size %zu\n", sz, base == p ? "yes" : "NO", range);
    CK(cuMemFree(p));
  }
  {  // Other allocators: how much does each cost per nvidia-smi / cuMemGetInfo?
    Snapshot b = snap();
    CUdeviceptr p;
    size_t pitch;
    CK(cuMemAllocPitch(&p, &pitch, 1000, 1000, 4));
    Snapshot a = snap();
    std::printf("  cuMemAllocPitch(1000 x 1000, elem 4): pitch %zu; ", pitch);
    print_snap("", a, &b);
    CK(cuMemFree(p));
    b = snap();
    CUarray arr;
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = 4096; d.Height = 4096; d.Depth = 4; d.Format = CU_AD_FORMAT_FLOAT; d.NumChannels = 1;
    CK(cuArray3DCreate(&arr, &d));
    CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
    CUresult rq = cuArrayGetMemoryRequirements(&req, arr, dev);  // documented for deferred-mapping arrays
    a = snap();
    std::printf("  cuArray3DCreate 4096x4096x4 float (256 MiB raw): cuArrayGetMemoryRequirements -> %s size %.2f MiB; ",
                err_name(rq), (double)req.size / kMiB);
    print_snap("", a, &b);
    CK(cuArrayDestroy(arr));
    b = snap();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0, rgran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CK(cuMemGetAllocationGranularity(&rgran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 64 * kMiB, &prop, 0));
    a = snap();
    std::printf("  VMM granularity min %zu rec %zu; cuMemCreate(64 MiB) unmapped: ", gran, rgran);
    print_snap("", a, &b);
    CK(cuMemRelease(h));
    b = snap();
    CUdeviceptr mp;
    CK(cuMemAllocManaged(&mp, 64 * kMiB, CU_MEM_ATTACH_GLOBAL));
    a = snap();
    std::printf("  cuMemAllocManaged(64 MiB) untouched: ");
    print_snap("", a, &b);
    CK(cuMemsetD8(mp, 1, 64 * kMiB));
    CK(cuCtxSynchronize());
    a = snap();
    std::printf("  ... after cuMemsetD8 on the device:   ");
    print_snap("", a, &b);
    CK(cuMemFree(mp));
    b = snap();
    void* hp;
    CK(cuMemHostAlloc(&hp, 64 * kMiB, 0));
    a = snap();
    std::printf("  cuMemHostAlloc(64 MiB):               ");
    print_snap("", a, &b);
    CK(cuMemFreeHost(hp));
    if (g_nvml.ok && g_nvml.get_mem_v2) {
      NvmlMemoryV2 m{};
      m.version = static_cast<unsigned>(sizeof(NvmlMemoryV2)) | (2u << 24);
      int r = g_nvml.get_mem_v2(g_nvml.dev, &m);
      std::printf("  nvmlDeviceGetMemoryInfo_v2 -> %d: total %.1f reserved %.1f free %.1f used %.1f MiB\n", r,
                  (double)m.total / kMiB, (double)m.reserved / kMiB, (double)m.free / kMiB, (double)m.used / kMiB);
      NvmlMemory m1{};
      g_nvml.get_mem(g_nvml.dev, &m1);
      std::printf("  nvmlDeviceGetMemoryInfo (v1):  total %.1f free %.1f used %.1f MiB\n",
                  (double)m1.total / kMiB, (double)m1.free / kMiB, (double)m1.used / kMiB);
    }
  }

  std::printf("\n=== 4. stream-ordered pools (default pool) ===\n");
  CUmemoryPool pool;
  CK(cuDeviceGetDefaultMemPool(&pool, dev));
  {
    CUmemoryPool p2 = nullptr, p3 = nullptr;
    CUmemLocation loc{};
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = dev;
    CUresult r2 = cuMemGetDefaultMemPool(&p2, &loc, CU_MEM_ALLOCATION_TYPE_PINNED);
    CUresult r3 = cuDeviceGetMemPool(&p3, dev);
    std::printf("  cuDeviceGetDefaultMemPool %p; cuMemGetDefaultMemPool -> %s %p; cuDeviceGetMemPool -> %s %p\n",
                (void*)pool, err_name(r2), (void*)p2, err_name(r3), (void*)p3);
  }
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  cuuint64_t zero = 0, maxv = UINT64_MAX;
  std::printf("  default release threshold: %llu\n", (unsigned long long)pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
  CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero));
  auto pool_line = [&](const char* what) {
    std::printf("  %-52s reserved=%10.2f MiB used=%10.2f MiB", what,
                (double)pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) / kMiB,
                (double)pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) / kMiB);
  };
  const std::pair<const char*, size_t> sizes[] = {
      {"1 MiB", kMiB}, {"3 MiB", 3 * kMiB}, {"100 MiB", 100 * kMiB}, {"1 GiB", kGiB}, {"33 MiB", 33 * kMiB}};
  Snapshot pb = snap();
  std::printf("  -- each size alone (threshold 0): alloc, read, free+sync, read\n");
  for (auto& [lbl, sz] : sizes) {
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, sz, s));
    char what[96];
    std::snprintf(what, sizeof what, "cuMemAllocAsync(%s)", lbl);
    pool_line(what);
    std::printf("  smi=%ld\n", smi_used_mib(pid));
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    pool_line("  after free+sync");
    std::printf("\n");
  }
  std::printf("  -- cumulative (threshold 0), holding each\n");
  std::vector<CUdeviceptr> held;
  for (auto& [lbl, sz] : sizes) {
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, sz, s));
    held.push_back(p);
    char what[96];
    std::snprintf(what, sizeof what, "+ cuMemAllocAsync(%s)", lbl);
    pool_line(what);
    std::printf("\n");
  }
  CK(cuStreamSynchronize(s));
  print_snap("holding all (nvidia-smi vs pool)", snap(), &pb);
  for (auto p : held) CK(cuMemFreeAsync(p, s));
  pool_line("after freeAsync, before sync");
  std::printf("\n");
  CK(cuStreamSynchronize(s));
  pool_line("after cuStreamSynchronize (threshold 0)");
  std::printf("\n");
  print_snap("after sync (threshold 0)", snap(), &pb);
  CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &maxv));
  held.clear();
  for (auto& [lbl, sz] : sizes) {
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, sz, s));
    held.push_back(p);
  }
  for (auto p : held) CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
  pool_line("same, threshold UINT64_MAX, after free+sync");
  std::printf("\n");
  print_snap("  nvidia-smi then", snap(), &pb);
  CK(cuMemPoolTrimTo(pool, 0));
  pool_line("after cuMemPoolTrimTo(0)");
  std::printf("\n");
  CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero));
  {  // A pool with maxSize: what does an over-size request return?
    CUmemPoolProps pp{};
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = dev;
    pp.maxSize = 256 * kMiB;
    CUmemoryPool mp;
    CUresult r = cuMemPoolCreate(&mp, &pp);
    if (r == CUDA_SUCCESS) {
      CUdeviceptr p1 = 0, p2 = 0;
      CUresult r1 = cuMemAllocFromPoolAsync(&p1, 200 * kMiB, mp, s);
      CUresult r2 = cuMemAllocFromPoolAsync(&p2, 200 * kMiB, mp, s);
      std::printf("  pool maxSize 256 MiB: 200 MiB -> %s, second 200 MiB -> %s\n", err_name(r1), err_name(r2));
      if (r1 == CUDA_SUCCESS) cuMemFreeAsync(p1, s);
      if (r2 == CUDA_SUCCESS) cuMemFreeAsync(p2, s);
      cuStreamSynchronize(s);
      cuMemPoolDestroy(mp);
    } else {
      std::printf("  cuMemPoolCreate(maxSize 256 MiB) -> %s\n", err_name(r));
    }
    CUdeviceptr huge = 0;
    CUresult rh = cuMemAllocAsync(&huge, 200 * kGiB, s);
    std::printf("  cuMemAllocAsync(200 GiB) on default pool -> %s\n", err_name(rh));
    CUresult rm = cuMemAlloc(&huge, 200 * kGiB);
    std::printf("  cuMemAlloc(200 GiB) -> %s\n", err_name(rm));
  }

  std::printf("\n=== 4b. call costs (median ns per call; batches of 100) ===\n");
  CUcontext cur;
  CUdevice d2;
  CUstreamCaptureStatus cs;
  cuuint64_t v;
  CUdeviceptr p4k;
  CK(cuMemAlloc(&p4k, 4 * kKiB));
  struct Cost { const char* name; double ns; };
  std::vector<Cost> costs;
  costs.push_back({"cuMemPoolGetAttribute(RESERVED_MEM_CURRENT)", median_ns([&] { cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v); })});
  costs.push_back({"cuCtxGetDevice", median_ns([&] { cuCtxGetDevice(&d2); })});
  costs.push_back({"cuCtxGetCurrent", median_ns([&] { cuCtxGetCurrent(&cur); })});
  costs.push_back({"cuStreamIsCapturing(created stream)", median_ns([&] { cuStreamIsCapturing(s, &cs); })});
  costs.push_back({"cuStreamIsCapturing(legacy 0)", median_ns([&] { cuStreamIsCapturing(nullptr, &cs); })});
  costs.push_back({"cuDeviceGetGraphMemAttribute(RESERVED)", median_ns([&] { cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v); })});
  costs.push_back({"cuMemGetAddressRange", median_ns([&] { CUdeviceptr b; size_t sz; cuMemGetAddressRange(&b, &sz, p4k); })});
  costs.push_back({"cuPointerGetAttribute(CONTEXT)", median_ns([&] { CUcontext c; cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, p4k); })});
  costs.push_back({"cuMemGetInfo", median_ns([&] { size_t f, t; cuMemGetInfo(&f, &t); }, 20, 50)});
  costs.push_back({"cuMemAlloc+cuMemFree 2 MiB", median_ns([&] { CUdeviceptr q; cuMemAlloc(&q, 2 * kMiB); cuMemFree(q); }, 20, 20)});
  costs.push_back({"cuMemAllocAsync+FreeAsync 2 MiB", median_ns([&] { CUdeviceptr q; cuMemAllocAsync(&q, 2 * kMiB, s); cuMemFreeAsync(q, s); }, 50, 100)});
  if (g_nvml.ok) costs.push_back({"nvmlDeviceGetMemoryInfo", median_ns([&] { NvmlMemory m; g_nvml.get_mem(g_nvml.dev, &m); }, 20, 20)});
  for (auto& c : costs) std::printf("  %-48s %10.1f ns\n", c.name, c.ns);
  CK(cuStreamSynchronize(s));
  CK(cuMemFree(p4k));

  std::printf("\n=== 5. graph memory (mem alloc nodes) ===\n");
  auto graph_line = [&](const char* what) {
    std::printf("  %-52s graph reserved=%8.2f MiB used=%8.2f MiB  smi=%ld MiB\n", what,
                (double)graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) / kMiB,
                (double)graph_attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) / kMiB, smi_used_mib(pid));
  };
  graph_line("before any graph");
  auto alloc_params = [&](size_t bytes) {
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = bytes;
    return p;
  };
  {  // A: alloc + free inside the graph.
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphNode an, fn;
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(64 * kMiB);
    CK(cuGraphAddMemAllocNode(&an, g, nullptr, 0, &ap));
    CK(cuGraphAddMemFreeNode(&fn, g, &an, 1, ap.dptr));
    graph_line("A (alloc+free 64 MiB): after add nodes");
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    graph_line("A: after instantiate");
    CK(cuGraphLaunch(ge, s));
    CK(cuStreamSynchronize(s));
    graph_line("A: after launch + sync");
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
    graph_line("A: after destroying exec + graph");
    CK(cuDeviceGraphMemTrim(dev));
    graph_line("A: after cuDeviceGraphMemTrim");
  }
  {  // B: alloc only; memory outlives the launch until freed outside the graph.
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphNode an;
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(64 * kMiB);
    CK(cuGraphAddMemAllocNode(&an, g, nullptr, 0, &ap));
    CUgraphExec ge;
    CK(cuGraphInstantiate(&ge, g, 0));
    graph_line("B (alloc-only 64 MiB): after instantiate");
    CK(cuGraphLaunch(ge, s));
    CK(cuStreamSynchronize(s));
    graph_line("B: after launch + sync");
    CK(cuMemFreeAsync(ap.dptr, s));
    CK(cuStreamSynchronize(s));
    graph_line("B: after cuMemFreeAsync + sync");
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
    CK(cuDeviceGraphMemTrim(dev));
    graph_line("B: after destroy + trim");
  }
  {  // C: an alloc node larger than the card: which call fails, with what?
    CUgraph g;
    CK(cuGraphCreate(&g, 0));
    CUgraphNode an, fn;
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(200 * kGiB);
    CUresult ra = cuGraphAddMemAllocNode(&an, g, nullptr, 0, &ap);
    std::printf("  C (alloc node 200 GiB): cuGraphAddMemAllocNode -> %s\n", err_name(ra));
    if (ra == CUDA_SUCCESS) {
      CK(cuGraphAddMemFreeNode(&fn, g, &an, 1, ap.dptr));
      CUgraphExec ge;
      CUresult ri = cuGraphInstantiate(&ge, g, 0);
      std::printf("  C: cuGraphInstantiate -> %s\n", err_name(ri));
      if (ri == CUDA_SUCCESS) {
        CUresult rl = cuGraphLaunch(ge, s);
        CUresult rs = cuStreamSynchronize(s);
        std::printf("  C: cuGraphLaunch -> %s, cuStreamSynchronize -> %s\n", err_name(rl), err_name(rs));
        cuGraphExecDestroy(ge);
      }
    }
    cuGraphDestroy(g);
    graph_line("C: after");
  }
  CK(cuStreamDestroy(s));
  return 0;
}

__global__ void null_kernel() {}

int run_runtime() {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 2 << 20);
  null_kernel<<<1, 1>>>();
  cudaError_t l = cudaGetLastError();
  cudaError_t sy = cudaDeviceSynchronize();
  cudaFree(p);
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  std::printf("runtime smoke: cudaMalloc %s, launch %s, sync %s, cudaMemGetInfo total %.1f MiB\n",
              cudaGetErrorName(e), cudaGetErrorName(l), cudaGetErrorName(sy), (double)t / kMiB);
  return (e || l || sy) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "symbols" && argc > 2) return run_symbols(argv[2]);
  if (mode == "memory") return run_memory();
  if (mode == "runtime") return run_runtime();
  std::fprintf(stderr, "usage: probe symbols EXPORTS_FILE | probe memory | probe runtime\n");
  return 2;
}
