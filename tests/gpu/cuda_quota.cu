// cuda_quota: CUDA C++ programs that the quota must hold for, built the way users build them
// (nvcc, static cudart: the runtime reaches the driver through dlopen + cuGetProcAddress).
//
//   cuda_quota MODE        MODE = malloc | async | managed | pitch | array3d | vmm | graph
//   cuda_quota_ptds threads   (the same source built with --default-stream per-thread)
//
// Each mode fills the device in 64 MiB steps until the allocation call fails (or until
// quota + 2 GiB, which counts as a failure), reads this pid's used_memory from nvidia-smi at
// the peak, frees everything, allocates again and checks a kernel's output. It prints one line
// `RESULT {json}` that tests/gpu/suite.py turns into a table row.
//
// Environment: SUITE_QUOTA_MIB (default 4096), the quota the suite set in CUSLICE_MEMORY_LIMIT.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kStep = 64 * kMiB;

size_t quota_bytes() {
  const char* q = std::getenv("SUITE_QUOTA_MIB");
  return (q ? std::strtoull(q, nullptr, 10) : 4096) * kMiB;
}

// This pid's used_memory per nvidia-smi, run without the hook (the hook may filter what NVML
// reports; the suite wants the driver's own figure). -1 when the pid is not listed.
long smi_used_mib() {
  FILE* f = popen("env -u LD_PRELOAD -u CUSLICE_MEMORY_LIMIT nvidia-smi "
                  "--query-compute-apps=pid,used_memory --format=csv,noheader,nounits", "r");
  if (!f) return -2;
  char line[256];
  long found = -1;
  const long me = getpid();
  while (std::fgets(line, sizeof line, f)) {
    long p = 0, m = 0;
    if (std::sscanf(line, "%ld, %ld", &p, &m) == 2 && p == me) found = m;
  }
  pclose(f);
  return found;
}

struct Result {
  std::string scenario;
  double fw_peak_mib = 0;  // what the program held at the peak
  long smi_peak_mib = -1;
  std::string oom = "none";
  bool oom_ok = false;
  bool after_free_ok = false;
  std::vector<std::pair<std::string, bool>> checks;
  std::string notes;

  void check(const std::string& what, bool ok) { checks.emplace_back(what, ok); }
  void emit() const {
    bool pass = true;
    for (auto& c : checks) pass = pass && c.second;
    std::string js = "{\"scenario\":\"" + scenario + "\",\"quota_mib\":" +
                     std::to_string(quota_bytes() / kMiB) + ",\"framework_peak_mib\":" +
                     std::to_string(fw_peak_mib) + ",\"smi_peak_mib\":" + std::to_string(smi_peak_mib) +
                     ",\"oom\":\"" + oom + "\",\"oom_ok\":" + (oom_ok ? "true" : "false") +
                     ",\"after_free_ok\":" + (after_free_ok ? "true" : "false") + ",\"checks\":{";
    for (size_t i = 0; i < checks.size(); ++i)
      js += (i ? "," : "") + std::string("\"") + checks[i].first + "\":" + (checks[i].second ? "true" : "false");
    js += "},\"notes\":\"" + notes + "\",\"pass\":" + (pass ? "true" : "false") + "}";
    std::printf("RESULT %s\n", js.c_str());
    std::fflush(stdout);
  }
};

__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = v ^ static_cast<uint32_t>(i);
}
__global__ void check_kernel(const uint32_t* p, size_t n, uint32_t v, unsigned long long* bad) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (p[i] != (v ^ static_cast<uint32_t>(i))) atomicAdd(bad, 1ull);
}

// Writes a pattern into [p, p+bytes) on `s`, reads it back on the device; true when all match.
bool verify(void* p, size_t bytes, cudaStream_t s = 0) {
  unsigned long long* bad = nullptr;
  if (cudaMallocHost(&bad, sizeof *bad) != cudaSuccess) return false;
  *bad = 0;
  const size_t n = bytes / 4;
  const uint32_t v = 0x9e3779b9u ^ static_cast<uint32_t>(bytes);
  fill_kernel<<<264, 256, 0, s>>>(static_cast<uint32_t*>(p), n, v);
  check_kernel<<<264, 256, 0, s>>>(static_cast<uint32_t*>(p), n, v, bad);
  bool ok = cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess && *bad == 0;
  cudaFreeHost(bad);
  return ok;
}

// Common checks of every fill: totals are the quota, the error is the right one, the peak per
// nvidia-smi is inside the quota, and the quota is usable (at most 1.5 GiB of it lost to the
// context and rounding).
void common_checks(Result& r, size_t held, bool oom_ok) {
  const size_t q = quota_bytes();
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  r.check("cudaMemGetInfo total == quota", t == q);
  r.oom_ok = oom_ok;
  r.check("OOM error is the API's own", oom_ok);
  r.check("nvidia-smi peak <= quota", r.smi_peak_mib >= 0 && size_t(r.smi_peak_mib) <= q / kMiB);
  r.check("reached quota - 1.5 GiB", held + 1536 * kMiB >= q);
  r.fw_peak_mib = double(held) / kMiB;
}

bool after_free(Result& r, size_t bytes) {  // allocate again, run a kernel over it
  void* p = nullptr;
  bool ok = cudaMalloc(&p, bytes) == cudaSuccess && verify(p, bytes);
  if (p) cudaFree(p);
  r.after_free_ok = ok;
  r.check("allocate + kernel after free", ok);
  return ok;
}

// ---- modes ---------------------------------------------------------------------------------

void mode_malloc(Result& r) {
  const size_t cap = quota_bytes() + 2048 * kMiB;
  std::vector<void*> v;
  cudaError_t e = cudaSuccess;
  while (v.size() * kStep < cap) {
    void* p;
    if ((e = cudaMalloc(&p, kStep)) != cudaSuccess) break;
    v.push_back(p);
  }
  cudaGetLastError();
  r.oom = cudaGetErrorName(e);
  r.smi_peak_mib = smi_used_mib();
  common_checks(r, v.size() * kStep, e == cudaErrorMemoryAllocation);
  // Small allocations at the edge must fail or succeed cleanly, never crash.
  int small_ok = 0;
  std::vector<void*> small;
  for (int i = 0; i < 100; ++i) {
    void* p;
    if (cudaMalloc(&p, 1024) == cudaSuccess) { small.push_back(p); ++small_ok; }
  }
  cudaGetLastError();
  for (void* p : small) cudaFree(p);
  r.notes += "1KiB allocs at peak: " + std::to_string(small_ok) + "/100 ok; ";
  r.check("kernel on held memory at peak", !v.empty() && verify(v.front(), kStep));
  for (size_t i = v.size() / 2; i < v.size(); ++i) cudaFree(v[i]);
  v.resize(v.size() / 2);
  after_free(r, v.size() / 2 * kStep);
  small.clear();
  small_ok = 0;
  for (int i = 0; i < 1000; ++i) {
    void* p;
    if (cudaMalloc(&p, 1024) == cudaSuccess) { small.push_back(p); ++small_ok; }
  }
  r.check("1000 x 1 KiB after free", small_ok == 1000);
  for (void* p : small) cudaFree(p);
  for (void* p : v) cudaFree(p);
}

void mode_async(Result& r) {
  const size_t cap = quota_bytes() + 2048 * kMiB;
  cudaMemPool_t pool;
  cudaDeviceGetDefaultMemPool(&pool, 0);
  uint64_t keep = UINT64_MAX;  // like PyTorch's and CuPy's async allocators: keep the reserve
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::vector<void*> v;
  cudaError_t e = cudaSuccess;
  while (v.size() * kStep < cap) {
    void* p;
    if ((e = cudaMallocAsync(&p, kStep, s)) != cudaSuccess) break;
    v.push_back(p);
  }
  cudaGetLastError();
  r.oom = cudaGetErrorName(e);
  cudaStreamSynchronize(s);
  r.smi_peak_mib = smi_used_mib();
  uint64_t reserved = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  r.notes += "pool reserved at peak " + std::to_string(reserved / kMiB) + " MiB; ";
  common_checks(r, v.size() * kStep, e == cudaErrorMemoryAllocation);
  r.check("kernel on held memory at peak", !v.empty() && verify(v.front(), kStep, s));
  const size_t n = v.size();
  for (void* p : v) cudaFreeAsync(p, s);
  cudaStreamSynchronize(s);
  v.clear();
  // The reserve is still there (threshold max): the same amount must fit again.
  bool again = true;
  for (size_t i = 0; i < n; ++i) {
    void* p;
    if (cudaMallocAsync(&p, kStep, s) != cudaSuccess) { again = false; break; }
    v.push_back(p);
  }
  cudaGetLastError();
  r.check("same amount again from the kept reserve", again);
  for (void* p : v) cudaFreeAsync(p, s);
  cudaStreamSynchronize(s);
  cudaMemPoolTrimTo(pool, 0);
  after_free(r, n / 2 * kStep);
  cudaStreamDestroy(s);
}

void mode_managed(Result& r) {
  // Capped at 6 GiB in all: never ask for more managed memory than the card has free.
  const size_t cap = std::min(quota_bytes() + 2048 * kMiB, 6144 * kMiB);
  std::vector<void*> v;
  cudaError_t e = cudaSuccess;
  while (v.size() * kStep < cap) {
    void* p;
    if ((e = cudaMallocManaged(&p, kStep)) != cudaSuccess) break;
    v.push_back(p);
    if (!verify(p, kStep)) { e = cudaGetLastError(); r.notes += "kernel on managed memory failed; "; break; }
  }
  cudaGetLastError();
  r.oom = cudaGetErrorName(e);
  r.smi_peak_mib = smi_used_mib();
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  r.notes += "managed held " + std::to_string(v.size() * kStep / kMiB) + " MiB; cudaMemGetInfo free " +
             std::to_string(f / kMiB) + " MiB; ";
  common_checks(r, v.size() * kStep, e == cudaErrorMemoryAllocation);
  for (void* p : v) cudaFree(p);
  after_free(r, 1024 * kMiB);
}

void mode_pitch(Result& r) {
  const size_t cap = quota_bytes() + 2048 * kMiB;
  std::vector<void*> v;
  size_t held = 0;
  cudaError_t e = cudaSuccess;
  while (held < cap) {
    void* p;
    size_t pitch = 0;
    if ((e = cudaMallocPitch(&p, &pitch, 8192, 8192)) != cudaSuccess) break;  // 64 MiB
    v.push_back(p);
    held += pitch * 8192;
  }
  cudaGetLastError();
  r.oom = cudaGetErrorName(e);
  r.smi_peak_mib = smi_used_mib();
  common_checks(r, held, e == cudaErrorMemoryAllocation);
  for (void* p : v) cudaFree(p);
  after_free(r, held / 2);
}

void mode_array3d(Result& r) {
  const size_t cap = quota_bytes() + 2048 * kMiB;
  cudaChannelFormatDesc d = cudaCreateChannelDesc<float>();
  const cudaExtent ext = make_cudaExtent(1024, 1024, 16);  // 64 MiB of floats
  std::vector<cudaArray_t> v;
  cudaError_t e = cudaSuccess;
  while (v.size() * kStep < cap) {
    cudaArray_t a;
    if ((e = cudaMalloc3DArray(&a, &d, ext)) != cudaSuccess) break;
    v.push_back(a);
  }
  cudaGetLastError();
  r.oom = cudaGetErrorName(e);
  r.smi_peak_mib = smi_used_mib();
  common_checks(r, v.size() * kStep, e == cudaErrorMemoryAllocation);
  for (auto a : v) cudaFreeArray(a);
  after_free(r, v.size() / 2 * kStep);
}

// VMM through the driver API, reached the way PyTorch reaches it: cudaGetDriverEntryPointByVersion.
template <class F>
bool entry(const char* name, F*& fn) {
  cudaDriverEntryPointQueryResult q;
  void* p = nullptr;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p)
    return false;
  fn = reinterpret_cast<F*>(p);
  return true;
}

void mode_vmm(Result& r) {
  decltype(&cuMemCreate) create;
  decltype(&cuMemRelease) release;
  decltype(&cuMemAddressReserve) reserve;
  decltype(&cuMemAddressFree) addr_free;
  decltype(&cuMemMap) map;
  decltype(&cuMemUnmap) unmap;
  decltype(&cuMemSetAccess) set_access;
  decltype(&cuGetErrorName) error_name;
  cudaFree(nullptr);  // make the primary context current
  if (!entry("cuMemCreate", create) || !entry("cuMemRelease", release) ||
      !entry("cuMemAddressReserve", reserve) || !entry("cuMemAddressFree", addr_free) ||
      !entry("cuMemMap", map) || !entry("cuMemUnmap", unmap) || !entry("cuMemSetAccess", set_access) ||
      !entry("cuGetErrorName", error_name)) {
    r.notes += "cudaGetDriverEntryPointByVersion failed; ";
    r.check("driver entry points", false);
    return;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const size_t cap = quota_bytes() + 2048 * kMiB;
  CUdeviceptr va = 0;
  if (reserve(&va, cap, 0, 0, 0) != CUDA_SUCCESS) { r.check("reserve VA", false); return; }
  std::vector<CUmemGenericAllocationHandle> hs;
  std::vector<bool> is_mapped;
  size_t mapped = 0;  // handles mapped with access set, from va upwards
  CUresult e = CUDA_SUCCESS;
  while (hs.size() * kStep < cap) {
    CUmemGenericAllocationHandle h;
    if ((e = create(&h, kStep, &prop, 0)) != CUDA_SUCCESS) break;
    const CUdeviceptr at = va + hs.size() * kStep;
    hs.push_back(h);
    is_mapped.push_back(false);
    if ((e = map(at, kStep, 0, h, 0)) != CUDA_SUCCESS) break;
    is_mapped.back() = true;
    if ((e = set_access(at, kStep, &acc, 1)) != CUDA_SUCCESS) break;
    ++mapped;
  }
  const char* en = nullptr;
  error_name(e, &en);
  r.oom = en ? en : "?";
  r.smi_peak_mib = smi_used_mib();
  common_checks(r, hs.size() * kStep, e == CUDA_ERROR_OUT_OF_MEMORY);
  r.check("kernel on mapped memory at peak", mapped > 0 && verify(reinterpret_cast<void*>(va), kStep));
  for (size_t i = 0; i < hs.size(); ++i) {
    if (is_mapped[i]) unmap(va + i * kStep, kStep);
    release(hs[i]);
  }
  // Again: half as many handles, mapped and written.
  const size_t n = hs.size() / 2;
  hs.clear();
  bool again = true;
  for (size_t i = 0; i < n && again; ++i) {
    CUmemGenericAllocationHandle h;
    again = create(&h, kStep, &prop, 0) == CUDA_SUCCESS && map(va + i * kStep, kStep, 0, h, 0) == CUDA_SUCCESS;
    if (again) hs.push_back(h);
  }
  again = again && set_access(va, n * kStep, &acc, 1) == CUDA_SUCCESS && verify(reinterpret_cast<void*>(va), n * kStep);
  r.after_free_ok = again;
  r.check("create + map + kernel after release", again);
  for (size_t i = 0; i < hs.size(); ++i) {
    unmap(va + i * kStep, kStep);
    release(hs[i]);
  }
  addr_free(va, cap);
}

cudaMemAllocNodeParams alloc_node(size_t bytes) {
  cudaMemAllocNodeParams p{};
  p.poolProps.allocType = cudaMemAllocationTypePinned;
  p.poolProps.location.type = cudaMemLocationTypeDevice;
  p.poolProps.location.id = 0;
  p.bytesize = bytes;
  return p;
}

// Builds alloc(bytes) -> free, instantiates and launches it; returns the first error of add / instantiate /
// launch / sync, and where it happened.
cudaError_t run_alloc_graph(size_t bytes, cudaStream_t s, std::string& where) {
  cudaGraph_t g;
  cudaGraphCreate(&g, 0);
  cudaGraphNode_t an, fn;
  cudaMemAllocNodeParams ap = alloc_node(bytes);
  cudaError_t e = cudaGraphAddMemAllocNode(&an, g, nullptr, 0, &ap);
  where = "cudaGraphAddMemAllocNode";
  if (e == cudaSuccess) {
    e = cudaGraphAddMemFreeNode(&fn, g, &an, 1, ap.dptr);
    where = "cudaGraphAddMemFreeNode";
  }
  cudaGraphExec_t ge = nullptr;
  if (e == cudaSuccess) {
    e = cudaGraphInstantiate(&ge, g, 0);
    where = "cudaGraphInstantiate";
  }
  if (e == cudaSuccess) {
    e = cudaGraphLaunch(ge, s);
    where = "cudaGraphLaunch";
  }
  if (e == cudaSuccess) {
    e = cudaStreamSynchronize(s);
    where = "cudaStreamSynchronize";
  }
  if (ge) cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return e;
}

void mode_graph(Result& r) {
  const size_t q = quota_bytes();
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaFree(nullptr);
  // 1. A graph allocation inside the quota works, and its memory counts: fill the rest.
  std::string where;
  cudaError_t e1 = run_alloc_graph(1024 * kMiB, s, where);
  r.check("1 GiB graph alloc node launches", e1 == cudaSuccess);
  size_t graph_reserved = 0;
  cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &graph_reserved);
  std::vector<void*> v;
  while (v.size() * kStep < q + 2048 * kMiB) {
    void* p;
    if (cudaMalloc(&p, kStep) != cudaSuccess) break;
    v.push_back(p);
  }
  cudaGetLastError();
  const long smi_fill = smi_used_mib();
  const size_t filled = v.size() * kStep;
  r.notes += "graph reserve " + std::to_string(graph_reserved / kMiB) + " MiB + cudaMalloc " +
             std::to_string(v.size() * kStep / kMiB) + " MiB (smi " + std::to_string(smi_fill) + "); ";
  r.check("graph reserve + fill <= quota per nvidia-smi", smi_fill >= 0 && size_t(smi_fill) <= q / kMiB);
  for (void* p : v) cudaFree(p);
  v.clear();
  cudaDeviceGraphMemTrim(0);
  // 2. An alloc node larger than the quota (but not the card) must fail with an OOM error.
  cudaError_t e2 = run_alloc_graph(q + 2048 * kMiB, s, where);
  cudaError_t sticky = cudaGetLastError();
  r.oom = std::string(cudaGetErrorName(e2)) + " at " + where;
  r.smi_peak_mib = std::max(smi_fill, smi_used_mib());
  r.oom_ok = e2 == cudaErrorMemoryAllocation;
  r.check("over-quota alloc node fails with cudaErrorMemoryAllocation", r.oom_ok);
  r.check("nvidia-smi peak <= quota", r.smi_peak_mib >= 0 && size_t(r.smi_peak_mib) <= q / kMiB);
  (void)sticky;
  // 3. The process is still healthy: a small graph and a kernel work.
  std::string w3;
  cudaError_t e3 = run_alloc_graph(64 * kMiB, s, w3);
  r.fw_peak_mib = double(graph_reserved + filled) / kMiB;
  r.after_free_ok = e3 == cudaSuccess;
  r.check("64 MiB graph after the failure", e3 == cudaSuccess);
  after_free(r, 256 * kMiB);
  cudaStreamDestroy(s);
}

// ---- threads (built with --default-stream per-thread) ----------------------------------------

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> l(m_);
    const int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

void mode_threads(Result& r) {
  constexpr int kThreads = 8;
  constexpr size_t kPiece = 32 * kMiB;
  const size_t q = quota_bytes();
  const size_t cap = q + 2048 * kMiB;
  cudaFree(nullptr);
  std::atomic<size_t> held{0};
  std::atomic<long> smi_max{-1};
  std::atomic<bool> filling{true};
  std::atomic<int> ooms{0}, other_errors{0}, launches{0};
  Barrier full(kThreads + 1), freed(kThreads + 1);
  std::atomic<int> again_ok{0};
  std::thread monitor([&] {  // nvidia-smi while the threads fill
    while (filling.load()) {
      long m = smi_used_mib();
      long cur = smi_max.load();
      while (m > cur && !smi_max.compare_exchange_weak(cur, m)) {}
    }
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<std::pair<void*, bool>> mine;  // pointer, allocated async
      for (int i = 0; held.load() < cap; ++i) {
        void* p = nullptr;
        const bool async = (i + t) % 2 == 1;
        cudaError_t e = async ? cudaMallocAsync(&p, kPiece, 0) : cudaMalloc(&p, kPiece);  // stream 0 = per-thread
        if (e != cudaSuccess) {
          cudaGetLastError();
          (e == cudaErrorMemoryAllocation ? ooms : other_errors)++;
          break;
        }
        mine.emplace_back(p, async);
        held += kPiece;
        fill_kernel<<<132, 256>>>(static_cast<uint32_t*>(p), kPiece / 4, uint32_t(t));
        if (cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(0) != cudaSuccess) { other_errors++; break; }
        launches++;
      }
      full.arrive_and_wait();   // everyone at the peak; main reads nvidia-smi
      full.arrive_and_wait();   // main is done reading
      for (auto& [p, async] : mine) {
        if (async) cudaFreeAsync(p, 0); else cudaFree(p);
        held -= kPiece;
      }
      cudaStreamSynchronize(0);
      freed.arrive_and_wait();
      void* p = nullptr;
      if (cudaMalloc(&p, 64 * kMiB) == cudaSuccess && verify(p, 64 * kMiB, 0)) again_ok++;
      if (p) cudaFree(p);
    });
  }
  full.arrive_and_wait();
  const size_t peak = held.load();
  long smi_peak = smi_used_mib();
  filling = false;
  monitor.join();
  smi_peak = std::max(smi_peak, smi_max.load());
  full.arrive_and_wait();
  freed.arrive_and_wait();
  for (auto& th : ts) th.join();
  r.smi_peak_mib = smi_peak;
  r.oom = std::to_string(ooms.load()) + "/" + std::to_string(kThreads) + " threads cudaErrorMemoryAllocation";
  r.notes += std::to_string(launches.load()) + " launches; other errors " + std::to_string(other_errors.load()) + "; ";
  common_checks(r, peak, ooms.load() == kThreads && other_errors.load() == 0);
  r.after_free_ok = again_ok.load() == kThreads;
  r.check("every thread allocates + launches after free", r.after_free_ok);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  Result r;
  r.scenario = "cuda-static " + mode;
  if (mode == "malloc") mode_malloc(r);
  else if (mode == "async") mode_async(r);
  else if (mode == "managed") mode_managed(r);
  else if (mode == "pitch") mode_pitch(r);
  else if (mode == "array3d") mode_array3d(r);
  else if (mode == "vmm") mode_vmm(r);
  else if (mode == "graph") mode_graph(r);
  else if (mode == "threads") { r.scenario = "cuda-ptds 8 threads"; mode_threads(r); }
  else {
    std::fprintf(stderr, "usage: cuda_quota malloc|async|managed|pitch|array3d|vmm|graph|threads\n");
    return 2;
  }
  r.emit();
  return 0;
}
