// Tenant-wide memory quotas across processes, with the real cuslice-scheduler: hooked child
// processes of one tenant share its quota, a SIGKILLed child's memory comes back, tenants
// are isolated, and a process the scheduler refuses fails CUDA initialisation.
// The parent (Tenant.*) runs the daemon and the children (TenantChild.*, this same binary).
#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "hook/base/nvml_api.h"
#include "protocol/shm_protocol.h"
#include "tests/hook/child_process.h"
#include "tests/hook/hook_test_support.h"

extern char** environ;

using namespace hook_test;

namespace {

constexpr uint64_t kContext = 512 * kMiB;   // FAKE_CUDA_CONTEXT_BYTES: each process's context
constexpr uint64_t kHeadroom = 128 * kMiB;  // CUSLICE_CONTEXT_HEADROOM: kept free once per tenant

uint64_t env_bytes(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::strtoull(v, nullptr, 10) : 0;
}

// ---- children -------------------------------------------------------------------------

class TenantChild : public CudaTest {
 protected:
  // A fake module's kernel: the fake driver's spin_<N>us kernels take N µs of device time.
  // nullptr (and a failure) when the driver refuses it.
  static CUfunction kernel(const char* name) {
    static CUmodule module = nullptr;
    static const char image[] = "spin kernels";
    if (module == nullptr) {
      EXPECT_EQ(cuModuleLoadData(&module, image), CUDA_SUCCESS);
    }
    CUfunction f = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&f, module, name), CUDA_SUCCESS) << name;
    return f;
  }
  // Sends the hook's log (stderr) to the file the environment variable names, for the counts
  // the monitor ends with. False (and a failure) when it cannot.
  static bool log_to(const char* variable) {
    const int log = open(std::getenv(variable), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    EXPECT_GE(log, 0) << variable;
    if (log < 0) return false;
    const bool moved = dup2(log, 2) == 2;
    EXPECT_TRUE(moved);
    close(log);
    return moved;
  }
};

// Allocates TEST_HOLD bytes, says "ready" on stdout, holds until stdin closes.
TEST_F(TenantChild, Hold) {
  if (!std::getenv("TEST_HOLD")) GTEST_SKIP() << "run by Tenant.*";
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, env_bytes("TEST_HOLD")), CUDA_SUCCESS);
  std::printf("ready\n");
  std::fflush(stdout);
  wait_for_stdin_to_close();
  cuMemFree(p);
}

// Checks the tenant's view and that TEST_FITS fits and TEST_REFUSED does not.
TEST_F(TenantChild, Probe) {
  if (!std::getenv("TEST_TOTAL")) GTEST_SKIP() << "run by Tenant.*";
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, env_bytes("TEST_TOTAL"));
  EXPECT_EQ(free, env_bytes("TEST_FREE"));
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, env_bytes("TEST_REFUSED")), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAlloc(&p, env_bytes("TEST_FITS")), CUDA_SUCCESS);
  cuMemFree(p);
}

// NVML lists the tenant's own processes only (FAKE_NVML_OTHER_PIDS: TEST_SAME_TENANT_PID of
// this tenant, TEST_OTHER_TENANT_PID of another).
TEST_F(TenantChild, SeesOnlyItsTenantsProcesses) {
  if (!std::getenv("TEST_SAME_TENANT_PID")) GTEST_SKIP() << "run by Tenant.*";
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, 64 * kMiB), CUDA_SUCCESS);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  ASSERT_NE(nvml, nullptr);
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto procs = reinterpret_cast<PFN_nvmlDeviceGetComputeRunningProcesses_v3>(
      dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  ASSERT_TRUE(init && by_index && procs);
  ASSERT_EQ(init(), NVML_SUCCESS);
  nvmlDevice_t dev;
  ASSERT_EQ(by_index(0, &dev), NVML_SUCCESS);
  nvmlProcessInfo_t list[16];
  unsigned int n = 16;
  ASSERT_EQ(procs(dev, &n, list), NVML_SUCCESS);
  std::vector<unsigned int> pids;
  for (unsigned int i = 0; i < n; ++i) pids.push_back(list[i].pid);
  const auto has = [&](unsigned long pid) {
    return std::find(pids.begin(), pids.end(), static_cast<unsigned int>(pid)) != pids.end();
  };
  EXPECT_TRUE(has(static_cast<unsigned long>(getpid())));
  EXPECT_TRUE(has(std::strtoul(std::getenv("TEST_SAME_TENANT_PID"), nullptr, 10)));
  EXPECT_FALSE(has(std::strtoul(std::getenv("TEST_OTHER_TENANT_PID"), nullptr, 10)));
  cuMemFree(p);
}

// A capture while kernels launched before it are still running: the monitor (started by
// joining a tenant) has records pending, and must not touch them until the capture ends. The
// fake driver, like the H100, invalidates a capture when a pending event is queried.
TEST_F(TenantChild, CapturesWhileEarlierWorkRuns) {
  if (!std::getenv("TEST_CAPTURE")) GTEST_SKIP() << "run by Tenant.*";
  CUfunction slow = kernel("spin_20000us"), quick = kernel("spin_10us");
  ASSERT_TRUE(slow != nullptr && quick != nullptr);
  CUstream work = nullptr, capture = nullptr;
  ASSERT_EQ(cuStreamCreate(&work, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  for (int round = 0; round < 5; ++round) {
    // 20 ms of work the monitor records an event behind (it looks every 0.1 ms while busy) ...
    ASSERT_EQ(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, work, nullptr, nullptr), CUDA_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    // ... still running through a capture that lasts several of the monitor's looks.
    ASSERT_EQ(cuStreamBeginCapture_v2(capture, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(cuLaunchKernel(quick, 1, 1, 1, 32, 1, 1, 0, capture, nullptr, nullptr), CUDA_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CUgraph graph = nullptr;
    ASSERT_EQ(cuStreamEndCapture(capture, &graph), CUDA_SUCCESS) << "round " << round;
    ASSERT_NE(graph, nullptr);
    cuGraphDestroy(graph);
    ASSERT_EQ(cuStreamSynchronize(work), CUDA_SUCCESS);
  }
  // A stream destroyed while it captures ends that capture for the monitor too: later work
  // is still seen to drain (the token goes back), which the parent checks.
  ASSERT_EQ(cuStreamBeginCapture_v2(capture, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(capture), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(quick, 1, 1, 1, 32, 1, 1, 0, work, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(work), CUDA_SUCCESS);
  std::printf("ready\n");
  std::fflush(stdout);
  wait_for_stdin_to_close();
}

// Launches alone in its tenant, so counted in per-thread records: 200 threads one after the
// other (more than there are records: records given back are claimed again, or a thread
// counts on the device), then 8 at once on streams of their own and on the default stream.
// Its log (CUSLICE_LOG_LEVEL=debug) goes to TEST_LOG, for the count the monitor ends with.
TEST_F(TenantChild, LaunchesFromManyThreads) {
  if (!std::getenv("TEST_LOG")) GTEST_SKIP() << "run by Tenant.*";
  ASSERT_TRUE(log_to("TEST_LOG"));
  CUfunction quick = kernel("spin_2us");
  ASSERT_NE(quick, nullptr);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  std::atomic<uint64_t> launched{0}, failed{0};
  const auto launch_some = [&](CUstream stream, int n) {
    cuCtxSetCurrent(ctx);
    for (int i = 0; i < n; ++i) {
      if (cuLaunchKernel(quick, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr) == CUDA_SUCCESS)
        launched.fetch_add(1);
      else
        failed.fetch_add(1);
    }
  };
  for (int t = 0; t < 200; ++t) std::thread(launch_some, nullptr, 5).join();
  std::vector<std::thread> threads;
  std::vector<CUstream> streams(8);
  for (CUstream& st : streams) ASSERT_EQ(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      launch_some(streams[t], 300);
      launch_some(nullptr, 100);
    });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(failed.load(), 0u);
  std::printf("ready %llu\n", static_cast<unsigned long long>(launched.load()));
  std::fflush(stdout);
  wait_for_stdin_to_close();
  for (CUstream st : streams) cuStreamDestroy(st);
}

// A launching thread finds the slot of the stream it launched on last without searching the
// table: here that stream is destroyed, and the next one created gets its handle (as the
// driver's allocator gives it); a 3 s kernel launched on it must keep the process busy.
// Prints "launched 1" when the handle was given again (0: the test cannot tell).
TEST_F(TenantChild, LaunchesOnAStreamHandleGivenAgain) {
  if (!std::getenv("TEST_REUSED_STREAM")) GTEST_SKIP() << "run by Tenant.*";
  CUfunction quick = kernel("spin_2us"), slow = kernel("spin_3000000us");
  ASSERT_TRUE(quick != nullptr && slow != nullptr);
  CUstream first = nullptr, again = nullptr;
  ASSERT_EQ(cuStreamCreate(&first, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(quick, 1, 1, 1, 32, 1, 1, 0, first, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(first), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(first), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&again, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, again, nullptr, nullptr), CUDA_SUCCESS);
  std::printf("launched %d\n", again == first ? 1 : 0);
  std::fflush(stdout);
  wait_for_stdin_to_close();
  EXPECT_EQ(cuStreamSynchronize(again), CUDA_SUCCESS);
  cuStreamDestroy(again);
}

// Launches alone in its tenant without a pause for 300 ms (a stream synchronize every 100
// launches, well under the monitor's look), then waits for them. Its log goes to
// TEST_STEADY_LOG.
TEST_F(TenantChild, LaunchesWithoutPause) {
  if (!std::getenv("TEST_STEADY_LOG")) GTEST_SKIP() << "run by Tenant.*";
  ASSERT_TRUE(log_to("TEST_STEADY_LOG"));
  CUfunction quick = kernel("spin_2us");
  ASSERT_NE(quick, nullptr);
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  uint64_t launched = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 100; ++i, ++launched)
      ASSERT_EQ(cuLaunchKernel(quick, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  }
  std::printf("ready %llu\n", static_cast<unsigned long long>(launched));
  std::fflush(stdout);
  wait_for_stdin_to_close();
  cuStreamDestroy(stream);
}

TEST(TenantChildRefused, InitialisationFails) {
  if (!std::getenv("TEST_EXPECT_REFUSAL")) GTEST_SKIP() << "run by Tenant.*";
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NOT_INITIALIZED);
}

// ---- parent ---------------------------------------------------------------------------

class Tenant : public ::testing::Test {
 protected:
  void SetUp() override {
    scheduler_.write_config("scheduler:\n  quantum: 20ms\n  gpu_memory: 16GiB\n"
                            "tenants:\n"
                            "  - name: a\n    allow_env: true\n    memory: 3GiB\n    compute: {share: 50%}\n"
                            "  - name: b\n    allow_env: true\n    memory: 2GiB\n    compute: {share: 50%}\n");
    ASSERT_TRUE(scheduler_.start());
    dir_ = scheduler_.dir();
    socket_ = scheduler_.socket();
    shm_ = scheduler_.shm_name();
  }
  Child child(const char* test, const char* tenant, std::vector<std::string> env) {
    env.push_back("CUSLICE_SOCKET=" + socket_);
    env.push_back(std::string("CUSLICE_TENANT=") + tenant);
    // Exact figures below: no warm-up allowances (test_tenant_memory.cpp tests them).
    env.push_back("CUSLICE_CONTEXT_WARMUP=0s");
    return spawn({"/proc/self/exe", std::string("--gtest_filter=") + test}, env, /*preload=*/true);
  }
  static std::string n(uint64_t v) { return std::to_string(v); }
  // Polls the segment up to `polls` times, 20 ms apart, until no registered process shows
  // work queued on GPU 0 (busy is cleared when the monitor gives the token back).
  bool seen_idle(int polls) {
    const int fd = shm_open(shm_.c_str(), O_RDONLY, 0);
    EXPECT_GE(fd, 0);
    if (fd < 0) return false;
    void* map = mmap(nullptr, sizeof(cuslice::shm::Segment), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(map, MAP_FAILED);
    if (map == MAP_FAILED) return false;
    const auto* seg = static_cast<const cuslice::shm::Segment*>(map);
    bool idle = false;
    for (int i = 0; i < polls && !idle; ++i) {
      idle = true;
      for (const cuslice::shm::ProcessSlot& p : seg->processes)
        if (p.state.load() == cuslice::shm::ProcessSlot::kActive &&
            (p.gpu_flags[0].load() & cuslice::shm::ProcessSlot::kBusy))
          idle = false;
      if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    munmap(map, sizeof(cuslice::shm::Segment));
    return idle;
  }

  cuslice::test_kit::ScopedScheduler scheduler_{"cuslice-tenant-test"};
  std::string dir_, socket_, shm_;
};

TEST_F(Tenant, ProcessesOfATenantShareItsQuota) {
  // A holds 1 GiB: the tenant then has 3 GiB - (the headroom + its context + 1 GiB) left for
  // everyone.
  Child holder = child("TenantChild.Hold", "a", {"TEST_HOLD=" + n(kGiB)});
  ASSERT_TRUE(read_line(holder.out, "ready"));
  const uint64_t quota = 3 * kGiB;
  const uint64_t left = quota - kHeadroom - 2 * kContext - kGiB;  // after the probe's own context
  Child probe = child("TenantChild.Probe", "a",
                      {"TEST_TOTAL=" + n(quota), "TEST_FREE=" + n(left), "TEST_REFUSED=" + n(left + 2 * kMiB),
                       "TEST_FITS=" + n(left)});
  EXPECT_EQ(wait_exit(probe), 0) << "the second process of tenant a did not see the tenant's quota";

  // Killed, the holder's memory and context come back to the tenant at once.
  kill(holder.pid, SIGKILL);
  EXPECT_EQ(wait_exit(holder), 128 + SIGKILL);
  const uint64_t alone = quota - kHeadroom - kContext;
  bool ok = false;
  for (int attempt = 0; attempt < 20 && !ok; ++attempt) {  // the daemon notices within ~1 s
    Child again = child("TenantChild.Probe", "a",
                        {"TEST_TOTAL=" + n(quota), "TEST_FREE=" + n(alone), "TEST_REFUSED=" + n(alone + 2 * kMiB),
                         "TEST_FITS=" + n(alone)});
    ok = wait_exit(again) == 0;
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ok) << "a SIGKILLed process's memory did not come back to its tenant";
}

TEST_F(Tenant, TenantsAreIsolated) {
  Child holder = child("TenantChild.Hold", "a", {"TEST_HOLD=" + n(2 * kGiB)});
  ASSERT_TRUE(read_line(holder.out, "ready"));
  // Tenant b sees only its own 2 GiB, untouched by a's 2 GiB.
  const uint64_t left = 2 * kGiB - kHeadroom - kContext;
  Child b = child("TenantChild.Probe", "b",
                  {"TEST_TOTAL=" + n(2 * kGiB), "TEST_FREE=" + n(left), "TEST_REFUSED=" + n(left + 2 * kMiB),
                   "TEST_FITS=" + n(left)});
  EXPECT_EQ(wait_exit(b), 0);
  EXPECT_EQ(wait_exit(holder), 0);
}

TEST_F(Tenant, NvmlShowsOnlyTheTenantsProcesses) {
  Child same = child("TenantChild.Hold", "a", {"TEST_HOLD=" + n(64 * kMiB)});
  Child other = child("TenantChild.Hold", "b", {"TEST_HOLD=" + n(64 * kMiB)});
  ASSERT_TRUE(read_line(same.out, "ready"));
  ASSERT_TRUE(read_line(other.out, "ready"));
  Child probe = child("TenantChild.SeesOnlyItsTenantsProcesses", "a",
                      {"TEST_SAME_TENANT_PID=" + n(same.pid), "TEST_OTHER_TENANT_PID=" + n(other.pid),
                       "FAKE_NVML_OTHER_PIDS=" + n(same.pid) + "," + n(other.pid)});
  EXPECT_EQ(wait_exit(probe), 0);
  EXPECT_EQ(wait_exit(same), 0);
  EXPECT_EQ(wait_exit(other), 0);
}

TEST_F(Tenant, CapturesSurviveTheMonitor) {
  Child c = child("TenantChild.CapturesWhileEarlierWorkRuns", "a", {"TEST_CAPTURE=1"});
  ASSERT_TRUE(read_line(c.out, "ready"));
  // Its work drained after the abandoned capture: the monitor saw it and marked the process
  // idle (busy cleared when the token is given back).
  const bool released = seen_idle(100);
  EXPECT_TRUE(released) << "the monitor stayed quiet after the capturing stream was destroyed";
  EXPECT_EQ(wait_exit(c), 0);
}

// Launches counted per thread, alone in a tenant: the process is seen to drain once they are
// done, and the monitor ends with every launch counted, none lost between threads that
// shared a record over time or launched at once.
TEST_F(Tenant, LaunchesCountedPerThreadAreAllCountedAndDrain) {
  const std::string log = dir_ + "/launches.log";
  Child c = child("TenantChild.LaunchesFromManyThreads", "a", {"TEST_LOG=" + log, "CUSLICE_LOG_LEVEL=debug"});
  std::string line;
  ASSERT_TRUE(read_line(c.out, "ready", &line));
  const unsigned long long expected = std::strtoull(line.c_str() + line.find(' ') + 1, nullptr, 10);
  EXPECT_EQ(expected, 200u * 5 + 8u * 400);
  // The daemon publishes the processes' flags every 500 ms: after two publications, the
  // process must have been seen drained (busy cleared when the token is given back).
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const bool drained = seen_idle(200);
  EXPECT_TRUE(drained) << "the process never drained after its launches completed";
  EXPECT_EQ(wait_exit(c), 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.rfind("at exit: ");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(std::strtoull(text.c_str() + at + 9, nullptr, 10), expected) << text.substr(at, 200);
  std::remove(log.c_str());
}

// Alone, while launches keep coming, the monitor records no event on the stream (a launch
// since its last look says the process is busy; a record would contend with the launching
// thread): it records once they stop, and the process is still seen to drain.
TEST_F(Tenant, LaunchesThatKeepComingAreRecordedOnlyOnceTheyStop) {
  const std::string log = dir_ + "/steady.log";
  Child c = child("TenantChild.LaunchesWithoutPause", "a", {"TEST_STEADY_LOG=" + log, "CUSLICE_LOG_LEVEL=debug"});
  std::string line;
  ASSERT_TRUE(read_line(c.out, "ready", &line));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE(seen_idle(200)) << "the process never drained after its launches completed";
  EXPECT_EQ(wait_exit(c), 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.rfind("monitor: ");
  ASSERT_NE(at, std::string::npos) << text;
  const unsigned long long passes = std::strtoull(text.c_str() + at + 9, nullptr, 10);
  const size_t rec = text.find(" records", at);
  ASSERT_NE(rec, std::string::npos) << text.substr(at, 200);
  const size_t num = text.rfind(' ', rec - 1);
  const unsigned long long records = std::strtoull(text.c_str() + num + 1, nullptr, 10);
  // About 300 looks while launching (one a millisecond); a record at each, before.
  EXPECT_GE(passes, 100u) << text.substr(at, 200);
  EXPECT_LT(records * 4, passes) << text.substr(at, 200);
  EXPECT_GE(records, 1u) << text.substr(at, 200);
  std::remove(log.c_str());
}

// Work launched on a stream whose handle a destroyed stream had is tracked: the process stays
// busy while it runs, not drained by a launch marked on the destroyed stream's old slot.
TEST_F(Tenant, ALaunchOnAStreamHandleGivenAgainKeepsTheProcessBusy) {
  Child c = child("TenantChild.LaunchesOnAStreamHandleGivenAgain", "a", {"TEST_REUSED_STREAM=1"});
  std::string line;
  ASSERT_TRUE(read_line(c.out, "launched", &line));
  if (line != "launched 1") {
    EXPECT_EQ(wait_exit(c), 0);
    GTEST_SKIP() << "the new stream did not get the destroyed one's handle (as under ASan's quarantine)";
  }
  // Two publications of the processes' flags (every 500 ms) into the 3 s kernel.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(seen_idle(1)) << "the process looked drained while its kernel ran";
  EXPECT_EQ(wait_exit(c), 0);
}

TEST_F(Tenant, AProcessOfNoTenantIsRefused) {
  Child c = child("TenantChildRefused.*", "nobody", {"TEST_EXPECT_REFUSAL=1"});
  EXPECT_EQ(wait_exit(c), 0);
}

}  // namespace
