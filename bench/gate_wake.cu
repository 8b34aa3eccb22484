// How long does a GPU stream blocked at a gate (cuStreamWaitValue32, GEQ, on a word in
// registered host memory: what libcuslice.so parks launches behind) take to go on once the
// host raises the word? This measures the wake-up without the hook (results: docs/evidence/benchmarks.md,
// "The gate").
//
//   nvcc -O2 -o gate_wake bench/gate_wake.cu -lcuda
//   ./gate_wake [--iterations N] [--block-us U] [--stream created|legacy]
//   ./gate_wake --busy SECONDS     a second process: a 1.6 ms kernel every 10 ms (the service)
//
// Each iteration: a 20 us kernel, a gate on word >= i, a write of i to a second word; the host
// sleeps U us (the GPU reaches the gate and waits), raises the word and spins until the second
// word says i: that time is the wake-up. Prints percentiles and how many took over 1 and 10 ms.
#include <cuda.h>
#include <cuda_runtime.h>

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

long long now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "%s: %s\n", what, s ? s : "?");
    std::exit(2);
  }
}

long long cycles_for_us(double us) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return static_cast<long long>(us * khz / 1000.0);
}

int busy(double seconds) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const long long cycles = cycles_for_us(1600);
  const long long end = now_ns() + static_cast<long long>(seconds * 1e9);
  while (now_ns() < end) {
    spin<<<132, 128, 0, s>>>(cycles);
    cudaStreamSynchronize(s);
    usleep(8400);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 2000;
  int block_us = 200;
  std::string stream_kind = "created";
  double busy_s = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--iterations") iterations = std::atoi(argv[i + 1]);
    else if (f == "--block-us") block_us = std::atoi(argv[i + 1]);
    else if (f == "--stream") stream_kind = argv[i + 1];
    else if (f == "--busy") busy_s = std::atof(argv[i + 1]);
  }
  cudaFree(nullptr);  // the primary context, current
  if (busy_s > 0) return busy(busy_s);

  // Two words of the process's own memory, registered as the hook registers its gate words.
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* words = static_cast<std::atomic<unsigned>*>(mem);
  check(cuMemHostRegister_v2(mem, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP), "register");
  CUdeviceptr dptr = 0;
  check(cuMemHostGetDevicePointer_v2(&dptr, mem, 0), "device pointer");
  CUstream stream = nullptr;
  if (stream_kind == "created") check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");
  else stream = CU_STREAM_LEGACY;

  const long long kernel = cycles_for_us(20);
  std::vector<long long> wake;
  wake.reserve(iterations);
  for (unsigned i = 1; i <= static_cast<unsigned>(iterations); ++i) {
    spin<<<1, 32, 0, reinterpret_cast<cudaStream_t>(stream)>>>(kernel);
    check(cuStreamWaitValue32_v2(stream, dptr, i, CU_STREAM_WAIT_VALUE_GEQ), "wait");
    check(cuStreamWriteValue32_v2(stream, dptr + sizeof(unsigned), i, CU_STREAM_WRITE_VALUE_DEFAULT), "write");
    usleep(block_us);
    const long long t0 = now_ns();
    words[0].store(i, std::memory_order_release);
    long long t1 = t0;
    while (words[1].load(std::memory_order_acquire) != i) {
      t1 = now_ns();
      if (t1 - t0 > 2'000'000'000LL) {
        std::printf("iteration %u: not woken after 2 s\n", i);
        return 1;
      }
    }
    wake.push_back(now_ns() - t0);
  }
  std::sort(wake.begin(), wake.end());
  auto pct = [&](double q) { return wake[std::min(wake.size() - 1, static_cast<size_t>(q * wake.size()))] / 1000.0; };
  const auto over = [&](long long ns) { return std::count_if(wake.begin(), wake.end(), [&](long long w) { return w > ns; }); };
  std::printf("gate_wake: %d iterations, stream %s, host waits %d us before opening: wake-up p50 %.1f us, p90 %.1f, "
              "p99 %.1f, p99.9 %.1f, max %.1f; over 1 ms %ld, over 10 ms %ld\n",
              iterations, stream_kind.c_str(), block_us, pct(0.5), pct(0.9), pct(0.99), pct(0.999),
              wake.back() / 1000.0, static_cast<long>(over(1'000'000)), static_cast<long>(over(10'000'000)));
  return 0;
}
