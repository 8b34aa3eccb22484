// A launch through the hook timed against the same launch straight to the driver, in one
// process: blocks of null-kernel launches on a created stream, alternating the hooked
// cuLaunchKernel (the one the program links against, so libcuslice.so's when preloaded) with
// the driver's own, found in libcuda's dynamic symbol table (dlsym would answer with the hook,
// on purpose). Both paths share the process, its threads and its driver state, so their ratio
// has none of the 10-20% by which the launch rate varies from one process to the next: a
// per-launch cost of about 1% shows over ten processes. bench/run.sh --in-process runs it
// natively (both paths are then the driver's: the method's own error), with the hook alone and
// scheduled.
//
// With --recorder MS both paths go straight to the driver; during one path's blocks a second
// thread records an event on the launching stream and queries it every MS milliseconds (what
// cuslice's monitor does at each look), during the other's it sleeps: their ratio is what
// those calls cost the launching thread.
//
//   launch_in_process [--recorder MS] [BLOCKS] [LAUNCHES]   # BLOCKS per path (20), LAUNCHES per block (20,000)
//
// Prints each path's median block in bench/summarize.py's format and their ratio.
#include <cuda.h>
#include <cuda_runtime.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

__global__ void null_kernel() {}

using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**);

struct Lookup {
  const char* name;
  void* found;
};

// The symbol's address in the loaded libcuda, from the library's own dynamic symbol table.
int find_in_libcuda(dl_phdr_info* info, size_t, void* arg) {
  auto* lookup = static_cast<Lookup*>(arg);
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libcuda.so") == nullptr) return 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  uintptr_t symtab = 0, strtab = 0;
  for (; dyn != nullptr && dyn->d_tag != DT_NULL; ++dyn) {
    if (dyn->d_tag == DT_SYMTAB) symtab = dyn->d_un.d_ptr;
    if (dyn->d_tag == DT_STRTAB) strtab = dyn->d_un.d_ptr;
  }
  if (symtab == 0 || strtab == 0) return 0;
  // The loader relocates these entries in place; an unrelocated one is an offset.
  if (symtab < info->dlpi_addr) symtab += info->dlpi_addr;
  if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;
  // The symbol table ends where the string table begins (their order in every libcuda).
  for (auto* s = reinterpret_cast<const ElfW(Sym)*>(symtab); reinterpret_cast<uintptr_t>(s) < strtab; ++s)
    if (s->st_value != 0 && ELF64_ST_TYPE(s->st_info) == STT_FUNC &&
        std::strcmp(reinterpret_cast<const char*>(strtab) + s->st_name, lookup->name) == 0) {
      lookup->found = reinterpret_cast<void*>(info->dlpi_addr + s->st_value);
      return 1;
    }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int arg = 1;
  int recorder_ms = 0;
  if (argc > arg && std::strcmp(argv[arg], "--recorder") == 0) {
    recorder_ms = argc > arg + 1 ? std::atoi(argv[arg + 1]) : 0;
    arg += 2;
  }
  const int blocks = argc > arg ? std::atoi(argv[arg]) : 20;
  const int per_block = argc > arg + 1 ? std::atoi(argv[arg + 1]) : 20000;
  if (blocks < 1 || per_block < 1 || (arg == 3 && recorder_ms < 1)) {
    std::fprintf(stderr, "usage: launch_in_process [--recorder MS] [BLOCKS] [LAUNCHES]\n");
    return 2;
  }
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "launch_in_process: no CUDA device\n");
    return 1;
  }
  Lookup lookup{"cuLaunchKernel", nullptr};
  dl_iterate_phdr(find_in_libcuda, &lookup);
  const auto driver = reinterpret_cast<Launch>(lookup.found);
  const Launch linked = &cuLaunchKernel;
  if (driver == nullptr) {
    std::fprintf(stderr, "launch_in_process: cuLaunchKernel not found in libcuda's symbol table\n");
    return 1;
  }
  CUfunction fn;
  cudaStream_t st;
  if (cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(null_kernel)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
    return 1;
  const auto stream = reinterpret_cast<CUstream>(st);
  // With the recorder, path 0's blocks run while it records, path 1's while it sleeps.
  const Launch paths[2] = {recorder_ms > 0 ? driver : linked, driver};
  std::atomic<bool> recording{false}, stop{false};
  std::thread recorder;
  if (recorder_ms > 0) {
    CUcontext ctx = nullptr;
    cuCtxGetCurrent(&ctx);
    recorder = std::thread([&, ctx] {
      cuCtxSetCurrent(ctx);
      CUevent ev;
      if (cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        std::fprintf(stderr, "launch_in_process: the recorder cannot create an event\n");
        return;
      }
      while (!stop.load()) {
        if (recording.load()) {
          cuEventRecord(ev, stream);
          cuEventQuery(ev);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(recorder_ms));
      }
      cuEventDestroy(ev);
    });
  }
  for (Launch path : paths)  // each path's first launch out of the timing
    if (path(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr) != CUDA_SUCCESS) return 1;
  if (cudaStreamSynchronize(st) != cudaSuccess) return 1;
  std::vector<double> ns[2];
  for (int b = 0; b < 2 * blocks; ++b) {
    const int p = (b + b / 2) % 2;  // ABBA: neither path always goes first
    const Launch path = paths[p];
    recording.store(p == 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per_block; ++i) path(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
    if (cudaStreamSynchronize(st) != cudaSuccess) return 1;
    ns[p].push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                    per_block);
  }
  if (recorder_ms > 0) {
    stop.store(true);
    recorder.join();
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  const char* names[2] = {recorder_ms > 0 ? "launch_recorder_on" : "launch_linked",
                          recorder_ms > 0 ? "launch_recorder_off" : "launch_driver"};
  for (int p = 0; p < 2; ++p)
    std::printf("BENCH %s %.1f %.1f %.1f ns/op\n", names[p], median(ns[p]), *std::min_element(ns[p].begin(), ns[p].end()),
                *std::max_element(ns[p].begin(), ns[p].end()));
  if (recorder_ms > 0)
    std::printf("RATIO recorder_on_over_off %.4f\n", median(ns[0]) / median(ns[1]));
  else
    std::printf("RATIO linked_over_driver %.4f%s\n", median(ns[0]) / median(ns[1]), linked == driver ? " same-function" : "");
  return 0;
}
