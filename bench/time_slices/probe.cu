// The time-slice probe: what a tiny kernel of a higher-priority tenant waits beside long
// kernels of a lower-priority one (bench/time_slices/run.sh).
//
//   probe spin MS SECONDS   back-to-back spin kernels of MS ms on every SM, four between
//                           synchronisations, for SECONDS; prints the share of the GPU kept
//   probe tick SECONDS      one tiny kernel every 10 ms on a stream of its own; prints the
//                           launch-to-completion latency's p50, p90, p99 and max over SECONDS
//
// A spin kernel busy-waits on clock64() for MS ms at the base clock, so the GPU cannot end it
// early: only a preemption (the time slice of its channel group ending) lets other work in.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void tiny() {}

using Clock = std::chrono::steady_clock;

int fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "probe: %s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int run_spin(double ms, double seconds) {
  int sms = 0, khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  const long long cycles = static_cast<long long>(ms * khz);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long kernels = 0;
  while (Clock::now() < end) {
    for (int i = 0; i < 4; ++i) spin<<<sms * 4, 256>>>(cycles);
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("spin", e);
    kernels += 4;
  }
  std::printf("spin: %ld kernels of %.2f ms in %.1f s (%.3f of the GPU)\n", kernels, ms, seconds,
              kernels * ms / 1000.0 / seconds);
  return 0;
}

int run_tick(double seconds) {
  cudaStream_t s;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) return fail("stream", e);
  std::vector<double> us;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    tiny<<<1, 1, 0, s>>>();
    if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) return fail("tick", e);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::sort(us.begin(), us.end());
  const auto q = [&](double f) { return us[std::min(us.size() - 1, static_cast<size_t>(f * us.size()))]; };
  std::printf("tick: n %zu p50 %.0f us p90 %.0f us p99 %.0f us max %.0f us\n", us.size(), q(0.5), q(0.9), q(0.99),
              us.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 4 && std::strcmp(argv[1], "spin") == 0) return run_spin(std::atof(argv[2]), std::atof(argv[3]));
  if (argc == 3 && std::strcmp(argv[1], "tick") == 0) return run_tick(std::atof(argv[2]));
  std::fprintf(stderr, "usage: probe spin MS SECONDS | probe tick SECONDS\n");
  return 2;
}
