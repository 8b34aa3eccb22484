// A tenant's memory as the driver counts it, across processes: the real cuslice-scheduler,
// hooked worker processes of one tenant on one simulated device they share
// (FAKE_CUDA_SHARED_DEVICE), and the fake NVML listing every process of that device with what
// it holds (FAKE_NVML_DEVICE_PROCESSES=1), as the real NVML does. The parent (TenantMemory.*)
// sums what the fake driver says each worker holds (the figure its NVML reports) and sets it
// against the tenant's quota; the workers (TenantMemoryChild.Worker, this same binary) take
// commands on stdin and answer on stdout.
//
// Run with FAKE_CUDA_CONTEXT_BYTES=64MiB and CUSLICE_CONTEXT_BYTES=64MiB (CMakeLists.txt), so
// that 32 contexts fit a small quota.
#include <cuda.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/hook/child_process.h"
#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

constexpr uint64_t kContext = 64 * kMiB;    // FAKE_CUDA_CONTEXT_BYTES in this test
constexpr uint64_t kHeadroom = 128 * kMiB;  // CUSLICE_CONTEXT_HEADROOM default
constexpr uint64_t kQuota = 8 * kGiB;       // the tenant's, below

// ---- the worker -------------------------------------------------------------------------

class TenantMemoryChild : public CudaTest {};

void answer(const std::string& text) {
  std::printf("@ %s\n", text.c_str());
  std::fflush(stdout);
}

// Commands, one a line: "fill" (allocate 64 MiB blocks, halving the size at each refusal down
// to 2 MiB: as much as the quota lets this process have), "alloc N" (one allocation of N
// bytes), "launch" (a first kernel launch: the fake driver adds FAKE_CUDA_MODULE_BYTES to the
// context, memory no allocation call shows), "free" (everything allocated so far). Answers
// "@ ..." lines. Ends when stdin closes.
TEST_F(TenantMemoryChild, Worker) {
  if (!std::getenv("TEST_WORKER")) GTEST_SKIP() << "run by TenantMemory.*";
  std::vector<CUdeviceptr> blocks;
  answer("ready");
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "fill") {
      uint64_t got = 0;
      for (uint64_t chunk = 64 * kMiB; chunk >= 2 * kMiB;) {
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, chunk) == CUDA_SUCCESS) {
          blocks.push_back(p);
          got += chunk;
        } else {
          chunk /= 2;
        }
      }
      answer("filled " + std::to_string(got));
    } else if (line.rfind("alloc ", 0) == 0) {
      CUdeviceptr p = 0;
      const CUresult r = cuMemAlloc(&p, std::strtoull(line.c_str() + 6, nullptr, 10));
      if (r == CUDA_SUCCESS) blocks.push_back(p);
      answer(r == CUDA_SUCCESS ? "ok" : "refused");
    } else if (line == "launch") {
      CUmodule module = nullptr;
      CUfunction f = nullptr;
      static const char image[] = "lazily loaded";
      const bool ok = cuModuleLoadData(&module, image) == CUDA_SUCCESS &&
                      cuModuleGetFunction(&f, module, "kernel") == CUDA_SUCCESS &&
                      cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) == CUDA_SUCCESS &&
                      cuCtxSynchronize() == CUDA_SUCCESS;
      answer(ok ? "launched" : "launch failed");
    } else if (line == "free") {
      for (CUdeviceptr p : blocks) cuMemFree(p);
      blocks.clear();
      answer("freed");
    }
  }
  for (CUdeviceptr p : blocks) cuMemFree(p);
}

// ---- the parent -------------------------------------------------------------------------

class TenantMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    // The device the workers share, and this process's view of it (fake_cuda_process_used).
    device_ = "cuslice-tenant-memory-" + std::to_string(getpid());
    shm_unlink(("/" + device_).c_str());
    setenv("FAKE_CUDA_SHARED_DEVICE", device_.c_str(), 1);
    fake_cuda_reset();
    scheduler_ = std::make_unique<Scheduler>("scheduler:\n  gpu_memory: 16GiB\n"
                                             "tenants:\n  - name: t\n    allow_env: true\n    memory: 8GiB\n");
    ASSERT_TRUE(scheduler_->running()) << "the scheduler did not start";
  }
  void TearDown() override {
    for (Child& c : workers_) {
      if (c.pid > 0) {
        kill(c.pid, SIGKILL);
        wait_exit(c);
      }
    }
    scheduler_.reset();
    unsetenv("FAKE_CUDA_SHARED_DEVICE");
    fake_cuda_reset();
    shm_unlink(("/" + device_).c_str());
  }

  // Starts a worker of tenant t; returns its index once it has its context.
  size_t start(std::vector<std::string> env = {}) {
    env.push_back("TEST_WORKER=1");
    env.push_back("FAKE_NVML_DEVICE_PROCESSES=1");
    env.push_back("CUSLICE_SOCKET=" + scheduler_->socket());
    env.push_back("CUSLICE_TENANT=t");
    workers_.push_back(spawn({"/proc/self/exe", "--gtest_filter=TenantMemoryChild.Worker"}, env, /*preload=*/true));
    EXPECT_EQ(reply(workers_.size() - 1), "ready");
    return workers_.size() - 1;
  }
  void send(size_t w, const std::string& command) {
    const std::string line = command + "\n";
    EXPECT_EQ(write(workers_[w].in, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  // The worker's next answer ("@ " lines; gtest's own output is skipped), "" at its end.
  std::string reply(size_t w) {
    std::string line;
    char c;
    while (read(workers_[w].out, &c, 1) == 1) {
      if (c != '\n') {
        line += c;
        continue;
      }
      if (line.rfind("@ ", 0) == 0) return line.substr(2);
      line.clear();
    }
    return "";
  }
  std::string ask(size_t w, const std::string& command) {
    send(w, command);
    return reply(w);
  }
  // What the driver counts for the tenant: the sum of what each worker holds.
  uint64_t driver_count() const {
    uint64_t sum = 0;
    for (const Child& c : workers_) sum += fake_cuda_process_used(c.pid, 0);
    return sum;
  }
  static std::string mib(uint64_t bytes) { return std::to_string(bytes / kMiB) + " MiB"; }

  std::string device_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<Child> workers_;
};

// 32 processes, all young (their contexts just made), fill the tenant at once: each one's own
// warm-up allowance gives way to its own allocations, so together they reach the quota but
// the tenant's one headroom, and never pass it.
TEST_F(TenantMemory, ThirtyTwoProcessesFillTheQuotaAndNeverPassIt) {
  constexpr size_t kWorkers = 32;
  for (size_t i = 0; i < kWorkers; ++i) start();
  EXPECT_EQ(driver_count(), kWorkers * kContext);
  for (size_t i = 0; i < kWorkers; ++i) send(i, "fill");
  for (size_t i = 0; i < kWorkers; ++i) EXPECT_EQ(reply(i).rfind("filled ", 0), 0u) << "worker " << i;
  const uint64_t counted = driver_count();
  std::printf("32 processes: the driver counts %s of the tenant's %s (%.1f%%)\n", mib(counted).c_str(),
              mib(kQuota).c_str(), 100.0 * static_cast<double>(counted) / static_cast<double>(kQuota));
  EXPECT_LE(counted, kQuota) << "over the quota by the driver's count";
  EXPECT_GE(counted, kQuota / 100 * 95) << "less than 95% of the quota usable";
  // All but the headroom and a last block of each process (2 MiB).
  EXPECT_GE(counted + kHeadroom + kWorkers * 2 * kMiB, kQuota);
}

// A process that filled its tenant grows by memory no allocation call shows (code loaded at
// its first launch, FAKE_CUDA_MODULE_BYTES=100MiB): the tenant's headroom holds it, and the
// growth is charged once measured, so what the tenant may still allocate shrinks by as much.
TEST_F(TenantMemory, GrowthWithoutAllocationCallsStaysWithinTheQuota) {
  const size_t a = start({"FAKE_CUDA_MODULE_BYTES=104857600"});
  const size_t b = start();
  EXPECT_EQ(ask(a, "fill").rfind("filled ", 0), 0u);
  EXPECT_EQ(ask(b, "fill").rfind("filled ", 0), 0u);
  EXPECT_GE(driver_count() + kHeadroom + 4 * kMiB, kQuota);
  EXPECT_EQ(ask(a, "launch"), "launched");
  EXPECT_LE(driver_count(), kQuota) << "the growth went over the quota";
  // Measured (at the next refusal or reconciliation), it is charged: neither process gets
  // the headroom back for allocations.
  EXPECT_EQ(ask(b, "fill"), "filled 0");
  EXPECT_EQ(ask(a, "fill"), "filled 0");
  EXPECT_LE(driver_count(), kQuota);
  EXPECT_GE(kQuota - driver_count(), kHeadroom - 100 * kMiB);
}

// Two processes start; one (a) grows 200 MiB at its first launch, more than the tenant's
// headroom. While a is young its tenant keeps a warm-up allowance free for it, so b filling
// the tenant leaves room for a's growth; without the allowance (CUSLICE_CONTEXT_WARMUP=0s)
// the same growth goes over the quota: the allowance is what covers it.
TEST_F(TenantMemory, AYoungProcessesFirstLaunchesAreCoveredBesideANeighbourThatFills) {
  const size_t young = start({"FAKE_CUDA_MODULE_BYTES=209715200"});
  const size_t filler = start();
  EXPECT_EQ(ask(filler, "fill").rfind("filled ", 0), 0u);
  EXPECT_EQ(ask(young, "launch"), "launched");
  EXPECT_LE(driver_count(), kQuota) << "the young process's growth went over the quota";
  EXPECT_EQ(ask(filler, "fill"), "filled 0");
  EXPECT_LE(driver_count(), kQuota);
}

TEST_F(TenantMemory, WithoutWarmUpAllowancesTheSameGrowthGoesOver) {
  const size_t grower = start({"FAKE_CUDA_MODULE_BYTES=209715200", "CUSLICE_CONTEXT_WARMUP=0s"});
  const size_t filler = start({"CUSLICE_CONTEXT_WARMUP=0s"});
  EXPECT_EQ(ask(filler, "fill").rfind("filled ", 0), 0u);
  EXPECT_EQ(ask(grower, "launch"), "launched");
  EXPECT_GT(driver_count(), kQuota) << "200 MiB of growth fit the 128 MiB headroom?";
  EXPECT_LE(driver_count(), kQuota + 200 * kMiB - kHeadroom);
}

// A warm-up allowance ends on its own (CUSLICE_CONTEXT_WARMUP), without its process doing
// anything: a neighbour's next refused allocation finds it over and gets the room.
TEST_F(TenantMemory, AWarmUpAllowanceEndsAndItsRoomComesBack) {
  const size_t filler = start({"CUSLICE_CONTEXT_WARMUP=0s"});
  const size_t idle = start({"CUSLICE_CONTEXT_WARMUP=1s"});
  const auto young_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  EXPECT_EQ(ask(filler, "fill").rfind("filled ", 0), 0u);
  const uint64_t before = driver_count();
  EXPECT_GE(kQuota - before, kHeadroom + kHeadroom) << "the idle process's allowance was not kept";
  std::this_thread::sleep_until(young_until + std::chrono::milliseconds(100));
  const std::string more = ask(filler, "fill");
  ASSERT_EQ(more.rfind("filled ", 0), 0u);
  EXPECT_GE(std::strtoull(more.c_str() + 7, nullptr, 10), kHeadroom - 2 * kMiB) << "the allowance's room stayed kept";
  EXPECT_LE(driver_count(), kQuota - kHeadroom);
  (void)idle;
}

// A process grows without allocation calls and then makes none (it never measures itself):
// its neighbour's reconciliation reads what it holds from NVML and keeps that free, so the
// tenant's headroom stays whole for the next growth.
TEST_F(TenantMemory, ANeighboursUnmeasuredGrowthIsKeptFree) {
  const size_t grower = start({"FAKE_CUDA_MODULE_BYTES=104857600", "CUSLICE_CONTEXT_WARMUP=0s"});
  const size_t filler = start({"CUSLICE_CONTEXT_WARMUP=0s"});
  EXPECT_EQ(ask(grower, "launch"), "launched");
  EXPECT_EQ(ask(filler, "fill").rfind("filled ", 0), 0u);
  EXPECT_LE(driver_count(), kQuota);
  EXPECT_GE(kQuota - driver_count(), kHeadroom) << "the grower's 100 MiB took the tenant's headroom";
  EXPECT_LE(kQuota - driver_count(), kHeadroom + 2 * kMiB);
}

}  // namespace
