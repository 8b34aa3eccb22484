// Instructions the hook adds per call on its hot paths, counted by callgrind against the fake
// driver (bench/path_cost/run.sh). Noise-free where GPU timings are not: the hook's cost
// per launch is tens of nanoseconds, below the ±20% run-to-run spread of a 4 µs launch.
//
//   path_cost launch|alloc|async N   N calls of the path, after a warm-up
//   path_cost idle                   cuInit, then wait for a signal (a registered process
//                                    of a tenant that launches nothing)
//
// The N calls run inside path_cost_counted(), and nothing else does: run.sh has callgrind
// dump its counts on entering and on leaving it, so that the dump in between holds exactly
// the calls (per thread with --separate-threads=yes: the launching thread's, and the hook's
// monitor thread's over the same time).
#include <cuda.h>
#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

#define CHECK(x)                                                           \
  do {                                                                     \
    CUresult r_ = (x);                                                     \
    if (r_ != CUDA_SUCCESS) {                                              \
      std::fprintf(stderr, "%s failed: %d\n", #x, static_cast<int>(r_)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

enum class Mode { kLaunch, kAlloc, kAsync };

void calls(Mode mode, long n, CUfunction f, CUstream s) {
  switch (mode) {
    case Mode::kLaunch:
      for (long i = 0; i < n; ++i) CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
      break;
    case Mode::kAlloc:
      for (long i = 0; i < n; ++i) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, 2 << 20));
        CHECK(cuMemFree(p));
      }
      break;
    case Mode::kAsync:
      for (long i = 0; i < n; ++i) {
        CUdeviceptr p;
        CHECK(cuMemAllocAsync(&p, 2 << 20, s));
        CHECK(cuMemFreeAsync(p, s));
      }
      break;
  }
}

int idle() {
  // Block the signals that end it before cuInit, so that no thread the hook starts takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  CHECK(cuInit(0));
  std::printf("ready\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  return 0;
}

}  // namespace

// The measured calls; its name is what run.sh gives callgrind's --dump-before/--dump-after.
extern "C" __attribute__((noinline)) void path_cost_counted(Mode mode, long n, CUfunction f, CUstream s) {
  calls(mode, n, f, s);
  asm volatile("" ::: "memory");  // keeps the call a call, not a tail jump
}

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "idle") == 0) return idle();
  if (argc != 3) {
    std::fprintf(stderr, "usage: path_cost launch|alloc|async N | path_cost idle\n");
    return 2;
  }
  Mode mode;
  if (std::strcmp(argv[1], "launch") == 0) {
    mode = Mode::kLaunch;
  } else if (std::strcmp(argv[1], "alloc") == 0) {
    mode = Mode::kAlloc;
  } else if (std::strcmp(argv[1], "async") == 0) {
    mode = Mode::kAsync;
  } else {
    std::fprintf(stderr, "unknown path %s\n", argv[1]);
    return 2;
  }
  const long n = std::atol(argv[2]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, "fake"));
  CUfunction f;
  CHECK(cuModuleGetFunction(&f, mod, "null_kernel"));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  // Warm-up: what the first calls set up (the stream's slot, the gate words, the token) is
  // not counted; the pause lets the hook's monitor see who else is registered (it looks
  // every 50 ms) and drain.
  calls(mode, 100, f, s);
  CHECK(cuStreamSynchronize(s));
  const timespec pause{0, 200'000'000};
  nanosleep(&pause, nullptr);
  path_cost_counted(mode, n, f, s);
  CHECK(cuStreamSynchronize(s));
  return 0;
}
