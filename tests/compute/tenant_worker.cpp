// A stand-in for a hooked GPU application, for the compute scenarios (test_compute.py): it
// drives the fake driver's simulated device the way an application drives a GPU, and reports
// on stdout, as one JSON line, how much device time it got and how long its work took.
//
//   tenant_worker --mode spin    --kernel-us N --sync-every K --start-at NS --end-at NS
//   tenant_worker --mode request --kernel-us N --period-ms P  --start-at NS --end-at NS
//                 [--stream created|non-blocking|legacy|per-thread] [--resets N] [--copy-back 1]
//
// Both modes: cuInit, the primary context, a module, the function "spin_<N>us" (which the fake
// runs for N us), a stream; then sleep until --start-at (CLOCK_MONOTONIC ns, so that several
// workers measure the same window), and work until --end-at.
//   spin:    launch K kernels, synchronise, repeat: a throughput job that always has work.
//            With --short-us S --shorts M, each batch is K kernels of N us then M of S us (a
//            trainer of mixed kernel lengths), and the report adds "max_queue_us": the most
//            device time found queued ahead right after a launch returned, past a 0.5 s
//            warm-up (what a request arriving then would wait for). --pause-us U sleeps U us
//            after each batch (a job that stops between bursts of work).
//   request: one kernel every P ms (a latency-sensitive service); for each, the latency from
//            submission (before the launch call, which is where the hook may wait for the
//            token) to completion (the synchronisation's return). A request that finds the
//            previous one still running past its slot starts at once; missed slots are skipped.
// --copy-back 1 (spin): each batch ends with a copy of a result to pageable host memory
// (cuMemcpyDtoHAsync_v2), which waits inside the driver for the batch, then the synchronisation.
// --resets N (spin): N times, evenly through the window, reset the primary context
// (cuDevicePrimaryCtxReset_v2, as cudaDeviceReset does), then set up again and go on:
// everything the hook made in the old context is gone.
// --channel-groups 1: after cuInit, allocate two GPU channel groups through the kernel driver's
// ioctl as libcuda does (on /dev/null: the fake kernel, libfake_nvidia_rm.so preloaded after
// the hook, answers), so that the hook has time slices to shorten below a higher tenant.
// Only work that completed before --end-at is counted, so workers started together measure
// the same window, whatever the last batch did.
//
// Output: {"pid", "tenant" ($CUSLICE_TENANT), "mode", "kernels", "busy_ns" (simulated kernel
// time counted by the fake driver for the kernels counted), "wall_ns" (start-at to the last
// counted completion), "late_ns" (how late after start-at the work began: start-up that took
// too long makes the window shorter), "max_batch_ns" (the longest launch-to-completion of a
// batch or request), "max_launch_us" (spin mode: the longest a launch call took, past a 0.5 s
// warm-up: how long the hook held the launching thread), "slow_launches" (spin mode: launch
// calls of 10 ms or more past the warm-up), with --resets "reset_ns" (the time the resets and
// setting up again took), "run_delay_ns" (the longest any of
// the process's threads waited for a CPU over the window, from /proc/self/task/*/schedstat:
// what the machine's load took from it, the hook's threads included),
// and in request mode "requests", "p50_us", "p99_us", "max_us"}. Exit status 0; 2 when a CUDA
// call fails (the JSON then has "error" and the call's result).
#include <cuda.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "hook/base/nvidia_rm_abi.h"
#include "tests/fake_driver/fake_cuda_control.h"

namespace {

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

void sleep_until(std::int64_t deadline_ns) {
  if (deadline_ns <= now_ns()) return;
  const timespec t{static_cast<time_t>(deadline_ns / 1'000'000'000),
                   static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) != 0) {
  }
}

struct Options {
  std::string mode = "spin";
  long kernel_us = 2000;
  long sync_every = 4;
  long period_ms = 20;
  std::int64_t start_at = 0;
  std::int64_t end_at = 0;
  std::string stream = "created";
  long short_us = 0;
  long shorts = 0;
  long resets = 0;
  long copy_back = 0;
  long pause_us = 0;
  long channel_groups = 0;
};

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr, "tenant_worker: %s\n", problem);
  std::exit(64);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--mode") o.mode = value;
    else if (flag == "--kernel-us") o.kernel_us = std::atol(value);
    else if (flag == "--sync-every") o.sync_every = std::atol(value);
    else if (flag == "--period-ms") o.period_ms = std::atol(value);
    else if (flag == "--start-at") o.start_at = std::atoll(value);
    else if (flag == "--end-at") o.end_at = std::atoll(value);
    else if (flag == "--stream") o.stream = value;
    else if (flag == "--short-us") o.short_us = std::atol(value);
    else if (flag == "--shorts") o.shorts = std::atol(value);
    else if (flag == "--resets") o.resets = std::atol(value);
    else if (flag == "--copy-back") o.copy_back = std::atol(value);
    else if (flag == "--pause-us") o.pause_us = std::atol(value);
    else if (flag == "--channel-groups") o.channel_groups = std::atol(value);
    else usage(("unknown flag " + flag).c_str());
  }
  if (o.mode != "spin" && o.mode != "request") usage("--mode is spin or request");
  if (o.kernel_us <= 0 || o.sync_every <= 0 || o.period_ms <= 0 || o.short_us < 0 || o.shorts < 0 || o.resets < 0 || o.pause_us < 0)
    usage("values must be > 0");
  if ((o.short_us > 0) != (o.shorts > 0)) usage("--short-us and --shorts go together");
  if (o.end_at <= o.start_at) usage("--end-at must follow --start-at");
  return o;
}

const char* tenant() {
  const char* name = std::getenv("CUSLICE_TENANT");
  return name != nullptr ? name : "";
}

[[noreturn]] void fail(const char* call, CUresult rc) {
  std::printf("{\"pid\": %d, \"tenant\": \"%s\", \"error\": \"%s\", \"result\": %d}\n", getpid(),
              tenant(), call, static_cast<int>(rc));
  std::fflush(stdout);
  std::exit(2);
}

#define CHECK(call)                          \
  do {                                       \
    const CUresult rc_ = (call);             \
    if (rc_ != CUDA_SUCCESS) fail(#call, rc_); \
  } while (0)

// What the loop counted: only work that completed before the end of the window.
struct Tally {
  unsigned long long kernels = 0;
  unsigned long long busy_ns = 0;
  std::int64_t last_completion = 0;
  std::int64_t max_batch_ns = 0;
  std::vector<std::int64_t> latencies_ns;  // request mode
  std::int64_t max_queue_ns = 0;           // spin mode with shorts
  std::int64_t max_launch_ns = 0;          // spin mode
  unsigned long long slow_launches = 0;    // spin mode: launch calls of 10 ms or more
};

CUstream make_stream(const std::string& kind) {
  if (kind == "legacy") return CU_STREAM_LEGACY;
  if (kind == "per-thread") return CU_STREAM_PER_THREAD;
  CUstream stream = nullptr;
  if (kind == "created") {
    CHECK(cuStreamCreate(&stream, CU_STREAM_DEFAULT));
  } else if (kind == "non-blocking") {
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  } else {
    usage("--stream is created, non-blocking, legacy or per-thread");
  }
  return stream;
}

void launch(CUfunction kernel, CUstream stream) {
  CHECK(cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr));
}

// Adds a batch that ran from submitted to completed, holding `kernels` kernels of busy_ns.
void count(Tally& tally, const Options& o, std::int64_t submitted, std::int64_t completed,
           unsigned long long kernels, unsigned long long busy_ns) {
  if (completed > o.end_at) return;
  tally.kernels += kernels;
  tally.busy_ns += busy_ns;
  tally.last_completion = completed;
  tally.max_batch_ns = std::max(tally.max_batch_ns, completed - submitted);
}

// Device time queued ahead of now, sampled once the warm-up is over.
void sample_queue(const Options& o, Tally& tally) {
  const std::int64_t now = now_ns();
  if (now < o.start_at + 500'000'000 || now > o.end_at) return;
  // The clock is read after the device's end: the fake takes its lock for it, and a wait for
  // the lock (its progress thread, the hook's monitor) counted as queued time before, up to
  // a few ms on a loaded machine (the 6 ms samples of queue_bound_is_time).
  const std::int64_t free_at = fake_cuda_device_free_at_ns(0);
  const std::int64_t q = free_at - now_ns();
  tally.max_queue_ns = std::max<std::int64_t>(tally.max_queue_ns, q);
}

// A launch, timed past the warm-up (how long the hook kept the thread).
void timed_launch(const Options& o, CUfunction kernel, CUstream stream, Tally& tally) {
  const std::int64_t before = now_ns();
  launch(kernel, stream);
  if (before >= o.start_at + 500'000'000 && before <= o.end_at) {
    const std::int64_t took = now_ns() - before;
    tally.max_launch_ns = std::max(tally.max_launch_ns, took);
    if (took >= 10'000'000) ++tally.slow_launches;
  }
}

void run_spin(const Options& o, std::int64_t until, CUfunction kernel, CUfunction short_kernel, CUstream stream,
              CUdeviceptr result, Tally& tally) {
  while (now_ns() < until) {
    const std::int64_t submitted = now_ns();
    const unsigned long long busy_before = fake_cuda_busy_ns();
    for (long k = 0; k < o.sync_every; ++k) {
      timed_launch(o, kernel, stream, tally);
      if (short_kernel != nullptr) sample_queue(o, tally);
    }
    for (long k = 0; k < o.shorts; ++k) {
      launch(short_kernel, stream);
      sample_queue(o, tally);
    }
    if (result != 0) {
      int pageable = 0;
      CHECK(cuMemcpyDtoHAsync_v2(&pageable, result, sizeof pageable, stream));
    }
    CHECK(cuStreamSynchronize(stream));
    count(tally, o, submitted, now_ns(), static_cast<unsigned long long>(o.sync_every + o.shorts),
          fake_cuda_busy_ns() - busy_before);
    if (o.pause_us > 0) usleep(static_cast<useconds_t>(o.pause_us));
  }
}

void run_requests(const Options& o, CUfunction kernel, CUstream stream, Tally& tally) {
  const std::int64_t period = o.period_ms * 1'000'000;
  std::int64_t slot = o.start_at;
  while (slot < o.end_at) {
    sleep_until(slot);
    const std::int64_t submitted = now_ns();
    const unsigned long long busy_before = fake_cuda_busy_ns();
    launch(kernel, stream);
    CHECK(cuStreamSynchronize(stream));
    const std::int64_t completed = now_ns();
    count(tally, o, submitted, completed, 1, fake_cuda_busy_ns() - busy_before);
    if (completed <= o.end_at) tally.latencies_ns.push_back(completed - submitted);
    while (slot <= completed) slot += period;  // a late request does not queue up more
  }
  sleep_until(o.end_at);  // idle, but still there (a tenant beside the others) to the end
}

// The q-quantile (nearest rank) in microseconds; 0 for no samples.
double percentile_us(std::vector<std::int64_t> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  std::size_t rank = static_cast<std::size_t>(q * static_cast<double>(samples.size()) + 0.999999);
  rank = std::clamp<std::size_t>(rank, 1, samples.size());
  return static_cast<double>(samples[rank - 1]) / 1000.0;
}

// What the work runs with, set up in the current context.
struct Work {
  CUfunction kernel = nullptr;
  CUfunction short_kernel = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr result = 0;  // --copy-back
};

Work set_up(const Options& o) {
  Work w;
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule module = nullptr;
  static const char image[] = "tenant_worker";
  CHECK(cuModuleLoadData(&module, image));
  const std::string name = "spin_" + std::to_string(o.kernel_us) + "us";
  CHECK(cuModuleGetFunction(&w.kernel, module, name.c_str()));
  if (o.shorts > 0)
    CHECK(cuModuleGetFunction(&w.short_kernel, module, ("spin_" + std::to_string(o.short_us) + "us").c_str()));
  w.stream = make_stream(o.stream);
  if (o.copy_back) CHECK(cuMemAlloc_v2(&w.result, sizeof(int)));
  return w;
}

// Two channel groups of one RM client, allocated as libcuda allocates them; the descriptor
// stays open for the process's life, as libcuda's /dev/nvidiactl does.
void allocate_channel_groups() {
  namespace rm = cuslice::rm;
  const int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  constexpr uint32_t kClient = 0xc1d00001;
  for (uint32_t group : {0x5c000015u, 0x5c000016u}) {
    rm::AllocParams64 a{kClient, kClient, group, rm::kClassChannelGroup, 0, 0, 0, 0, 0xffffffff};
    if (fd < 0 || ioctl(fd, _IOWR(rm::kIoctlMagic, rm::kEscRmAlloc, rm::AllocParams64), &a) != 0 || a.status != rm::kOk)
      fail("channel group allocation", CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace

// Each of the process's threads by id: the time it spent runnable but waiting for a CPU, in
// ns (the second field of its schedstat; nothing where the kernel does not say).
std::map<std::string, unsigned long long> run_delays() {
  std::map<std::string, unsigned long long> out;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return out;
  while (const dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/schedstat";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      unsigned long long on_cpu = 0, waited = 0;
      if (std::fscanf(f, "%llu %llu", &on_cpu, &waited) == 2) out[e->d_name] = waited;
      std::fclose(f);
    }
  }
  closedir(tasks);
  return out;
}

// The most one thread waited for a CPU since `before` (threads started since: all of theirs).
// The launching thread and the hook's monitor each stall the work alone.
unsigned long long most_run_delay_since(const std::map<std::string, unsigned long long>& before) {
  unsigned long long most = 0;
  for (const auto& [tid, waited] : run_delays()) {
    const auto was = before.find(tid);
    most = std::max(most, waited - (was != before.end() ? std::min(was->second, waited) : 0));
  }
  return most;
}

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  CHECK(cuInit(0));
  if (o.channel_groups) allocate_channel_groups();
  Work w = set_up(o);

  sleep_until(o.start_at);
  const std::int64_t late_ns = std::max<std::int64_t>(now_ns() - o.start_at, 0);
  const auto delays_before = run_delays();
  std::int64_t reset_ns = 0;  // spent resetting the context and setting up again
  Tally tally;
  if (o.mode == "spin") {
    for (long phase = 0; phase <= o.resets; ++phase) {
      if (phase > 0) {
        const std::int64_t reset_from = now_ns();
        CHECK(cuDevicePrimaryCtxReset_v2(0));
        CHECK(cuDevicePrimaryCtxRelease_v2(0));  // set_up retains it again
        w = set_up(o);
        reset_ns += now_ns() - reset_from;
      }
      run_spin(o, o.start_at + (o.end_at - o.start_at) * (phase + 1) / (o.resets + 1), w.kernel, w.short_kernel,
               w.stream, w.result, tally);
    }
  } else {
    run_requests(o, w.kernel, w.stream, tally);
  }

  const unsigned long long delay = most_run_delay_since(delays_before);
  std::printf("{\"pid\": %d, \"tenant\": \"%s\", \"mode\": \"%s\", \"kernels\": %llu, "
              "\"busy_ns\": %llu, \"wall_ns\": %" PRId64 ", \"late_ns\": %" PRId64
              ", \"max_batch_ns\": %" PRId64 ", \"run_delay_ns\": %llu",
              getpid(), tenant(), o.mode.c_str(), tally.kernels, tally.busy_ns,
              tally.last_completion > 0 ? tally.last_completion - o.start_at : 0, late_ns,
              tally.max_batch_ns, delay);
  if (o.resets > 0) std::printf(", \"reset_ns\": %" PRId64, reset_ns);
  if (o.shorts > 0) std::printf(", \"max_queue_us\": %.1f", static_cast<double>(tally.max_queue_ns) / 1000.0);
  if (o.mode == "spin")
    std::printf(", \"max_launch_us\": %.1f, \"slow_launches\": %llu", static_cast<double>(tally.max_launch_ns) / 1000.0,
                tally.slow_launches);
  if (o.mode == "request") {
    std::printf(", \"requests\": %zu, \"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f",
                tally.latencies_ns.size(), percentile_us(tally.latencies_ns, 0.50),
                percentile_us(tally.latencies_ns, 0.99), percentile_us(tally.latencies_ns, 1.0));
  }
  std::printf("}\n");
  std::fflush(stdout);
  cuDevicePrimaryCtxRelease_v2(0);
  return 0;
}
