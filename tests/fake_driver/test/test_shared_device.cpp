// One simulated device shared by several processes (FAKE_CUDA_SHARED_DEVICE): their kernels take
// turns on one timeline, nothing is lost when many launch at once, they share the device's
// memory, a killed process leaves nothing held, and the shared object is usable however its creator died, or refused when it is
// not a timeline. Processes are forked from this (single-threaded) test; each child starts the
// fake afresh with fake_cuda_reset(), as a new process would.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "tests/fake_driver/cuda/device_timeline.h"
#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

using fake_cuda::monotonic_ns;
using fake_cuda::TimelineSegment;

constexpr long long kMs = 1'000'000;

class SharedDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    static int serial = 0;
    name_ = "fake-cuda-test-" + std::to_string(getpid()) + "-" + std::to_string(++serial);
    shm_unlink(("/" + name_).c_str());
    setenv("FAKE_CUDA_SHARED_DEVICE", name_.c_str(), 1);  // read by the next fake_cuda_reset()
  }

  void TearDown() override {
    children_.KillAll();
    unsetenv("FAKE_CUDA_SHARED_DEVICE");
    fake_cuda_reset();
    shm_unlink(("/" + name_).c_str());
  }

  // A fresh start of the fake (reading the environment), cuInit, the primary context, and a
  // function of the given name, in this process.
  static CUfunction Start(const char* kernel) {
    fake_cuda_reset();
    if (cuInit(0) != CUDA_SUCCESS) return nullptr;
    CUcontext ctx = nullptr;
    CUmodule module = nullptr;
    CUfunction f = nullptr;
    static const char image[] = "any bytes";
    if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cuModuleLoadData(&module, image) != CUDA_SUCCESS ||
        cuModuleGetFunction(&f, module, kernel) != CUDA_SUCCESS) {
      return nullptr;
    }
    return f;
  }

  static CUresult Launch(CUfunction f, CUstream stream = nullptr) {
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
  }

  pid_t Spawn(std::function<int()> body) { return children_.Spawn(std::move(body)); }
  int WaitExit(pid_t pid) { return children_.WaitExit(pid); }

  // Creates the shared object by hand, as a creator that died at some point would leave it.
  int CreateObject(off_t size) {
    const int fd = shm_open(("/" + name_).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    if (size > 0) {
      EXPECT_EQ(ftruncate(fd, size), 0);
    }
    return fd;
  }

  std::string name_;
  ChildProcesses children_;
};

TEST_F(SharedDevice, KernelsOfTwoProcessesTakeTurnsOnTheDevice) {
  int queued[2];
  ASSERT_EQ(pipe(queued), 0);
  const pid_t child = Spawn([&] {
    CUfunction f = Start("spin_30000us");
    if (f == nullptr || Launch(f) != CUDA_SUCCESS) return 1;
    if (write(queued[1], "q", 1) != 1) return 2;
    if (cuCtxSynchronize() != CUDA_SUCCESS) return 3;
    return fake_cuda_busy_ns() == 30'000'000u ? 0 : 4;
  });
  CUfunction f = Start("spin_5000us");
  ASSERT_NE(f, nullptr);
  char byte = 0;
  ASSERT_EQ(read(queued[0], &byte, 1), 1);
  const long long child_end = fake_cuda_device_free_at_ns(0);
  EXPECT_GT(child_end, monotonic_ns()) << "the child's kernel should still be running";
  ASSERT_EQ(Launch(f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns(), child_end + 5 * kMs) << "ours ran after the child's";
  EXPECT_EQ(fake_cuda_busy_ns(), 5'000'000u);
  EXPECT_EQ(fake_cuda_device_busy_ns(0), 35'000'000u);
  EXPECT_EQ(fake_cuda_device_kernels(0), 2u);
  EXPECT_EQ(WaitExit(child), 0);
}

TEST_F(SharedDevice, WithoutTheKnobEachProcessHasItsOwnDevice) {
  unsetenv("FAKE_CUDA_SHARED_DEVICE");
  int queued[2];
  ASSERT_EQ(pipe(queued), 0);
  const pid_t child = Spawn([&] {
    CUfunction f = Start("spin_30000us");
    if (f == nullptr || Launch(f) != CUDA_SUCCESS) return 1;
    if (write(queued[1], "q", 1) != 1) return 2;
    return cuCtxSynchronize() == CUDA_SUCCESS ? 0 : 3;
  });
  CUfunction f = Start("spin_5000us");
  ASSERT_NE(f, nullptr);
  char byte = 0;
  ASSERT_EQ(read(queued[0], &byte, 1), 1);
  EXPECT_LE(fake_cuda_device_free_at_ns(0), monotonic_ns());
  ASSERT_EQ(Launch(f), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_busy_ns(0), 5'000'000u);
  EXPECT_EQ(fake_cuda_device_kernels(0), 1u);
  EXPECT_EQ(WaitExit(child), 0);
}

TEST_F(SharedDevice, ProcessesLaunchingAtOnceLoseNoKernelAndNeverOverlap) {
  constexpr int kProcesses = 4, kKernels = 50;  // of 100 us: 20 ms of device time in all
  const long long before = monotonic_ns();
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    pids.push_back(Spawn([] {
      CUfunction f = Start("spin_100us");
      CUstream stream = nullptr;
      if (f == nullptr || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return 1;
      for (int k = 0; k < kKernels; ++k) {
        if (Launch(f, stream) != CUDA_SUCCESS) return 2;
      }
      return cuStreamSynchronize(stream) == CUDA_SUCCESS ? 0 : 3;
    }));
  }
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 0);
  ASSERT_EQ(Start("saxpy") != nullptr, true);
  EXPECT_EQ(fake_cuda_device_kernels(0), unsigned{kProcesses * kKernels});
  EXPECT_EQ(fake_cuda_device_busy_ns(0), unsigned{kProcesses * kKernels} * 100'000u);
  EXPECT_GE(fake_cuda_device_free_at_ns(0), before + 20 * kMs);
}

TEST_F(SharedDevice, AKilledProcessHoldsNothingButItsQueuedWorkStillRuns) {
  int queued[2];
  ASSERT_EQ(pipe(queued), 0);
  const pid_t child = Spawn([&] {
    CUfunction f = Start("spin_40000us");
    if (f == nullptr || Launch(f) != CUDA_SUCCESS) return 1;
    if (write(queued[1], "q", 1) != 1) return 2;
    pause();
    return 3;
  });
  char byte = 0;
  ASSERT_EQ(read(queued[0], &byte, 1), 1);
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  CUfunction f = Start("spin_1000us");
  ASSERT_NE(f, nullptr);
  const long long dead_end = fake_cuda_device_free_at_ns(0);
  ASSERT_EQ(Launch(f), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns(), dead_end + 1 * kMs);
  EXPECT_EQ(fake_cuda_device_kernels(0), 2u);
}

TEST_F(SharedDevice, TheProcessesShareTheDevicesMemory) {
  constexpr size_t kGiB = size_t{1} << 30, kContext = size_t{512} << 20;
  int held[2], done[2];
  ASSERT_EQ(pipe(held), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = Spawn([&] {
    CUdeviceptr p = 0;
    if (Start("saxpy") == nullptr || cuMemAlloc_v2(&p, 10 * kGiB) != CUDA_SUCCESS) return 1;
    if (write(held[1], "h", 1) != 1) return 2;
    char byte = 0;
    return read(done[0], &byte, 1) == 1 ? 0 : 3;
  });
  char byte = 0;
  ASSERT_EQ(read(held[0], &byte, 1), 1);
  ASSERT_NE(Start("saxpy"), nullptr);
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 16 * kGiB);
  EXPECT_EQ(free, 16 * kGiB - 10 * kGiB - 2 * kContext) << "free counts every process's memory";
  EXPECT_EQ(fake_cuda_device_used(0), kContext) << "this process's own";
  EXPECT_EQ(fake_cuda_device_used_all(0), 10 * kGiB + 2 * kContext);
  EXPECT_EQ(fake_cuda_process_used(child, 0), 10 * kGiB + kContext);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 6 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(write(done[1], "d", 1), 1);
  EXPECT_EQ(WaitExit(child), 0);
  EXPECT_EQ(cuMemAlloc_v2(&p, 6 * kGiB), CUDA_SUCCESS) << "an exited process holds nothing";
}

TEST_F(SharedDevice, AKilledProcessesMemoryIsFree) {
  constexpr size_t kGiB = size_t{1} << 30;
  int held[2];
  ASSERT_EQ(pipe(held), 0);
  const pid_t child = Spawn([&] {
    CUdeviceptr p = 0;
    if (Start("saxpy") == nullptr || cuMemAlloc_v2(&p, 14 * kGiB) != CUDA_SUCCESS) return 1;
    if (write(held[1], "h", 1) != 1) return 2;
    pause();
    return 3;
  });
  char byte = 0;
  ASSERT_EQ(read(held[0], &byte, 1), 1);
  ASSERT_NE(Start("saxpy"), nullptr);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  EXPECT_EQ(cuMemAlloc_v2(&p, 4 * kGiB), CUDA_SUCCESS);
}

TEST_F(SharedDevice, AnObjectItsCreatorDidNotSizeIsUsable) {
  close(CreateObject(0));
  CUfunction f = Start("spin_1000us");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(Launch(f), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_kernels(0), 1u);
}

TEST_F(SharedDevice, ANameWithItsSlashIsTheSameObject) {
  setenv("FAKE_CUDA_SHARED_DEVICE", ("/" + name_).c_str(), 1);
  CUfunction f = Start("spin_1000us");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(Launch(f), CUDA_SUCCESS);
  setenv("FAKE_CUDA_SHARED_DEVICE", name_.c_str(), 1);
  fake_cuda_reset();
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_kernels(0), 1u);
}

TEST_F(SharedDevice, AnObjectOfAnotherLayoutIsRefused) {
  const int fd = CreateObject(sizeof(TimelineSegment));
  void* mapped = mmap(nullptr, sizeof(TimelineSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  static_cast<TimelineSegment*>(mapped)->tag.store(TimelineSegment::kTag + 1);
  munmap(mapped, sizeof(TimelineSegment));
  close(fd);
  fake_cuda_reset();
  EXPECT_EQ(cuInit(0), CUDA_ERROR_OPERATING_SYSTEM);
}

TEST_F(SharedDevice, AnObjectOfAnotherSizeIsRefused) {
  close(CreateObject(sizeof(TimelineSegment) * 2));
  fake_cuda_reset();
  EXPECT_EQ(cuInit(0), CUDA_ERROR_OPERATING_SYSTEM);
}

TEST_F(SharedDevice, ANameThatIsNotAShmNameIsRefused) {
  for (const char* bad : {"a/b", "/", "/a/b"}) {
    setenv("FAKE_CUDA_SHARED_DEVICE", bad, 1);
    fake_cuda_reset();
    EXPECT_EQ(cuInit(0), CUDA_ERROR_OPERATING_SYSTEM) << bad;
  }
}

}  // namespace
