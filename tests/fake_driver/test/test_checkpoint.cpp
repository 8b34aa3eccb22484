// The checkpoint API (cuCheckpointProcess*) on one device shared by several processes: a lock
// holds the target's driver calls, a checkpoint moves its memory off the device (after its
// submitted work), a restore takes the memory back only if it fits, an unlock lets the calls go
// on; what the driver documents it cannot checkpoint is refused, injected failures and dead
// callers leave meaningful states. Targets are forked children that start the fake afresh; the
// test process is the caller, as the scheduler is.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

using fake_cuda::monotonic_ns;

constexpr long long kMs = 1'000'000;

// One byte each way between the test and a child.
class Channel {
 public:
  Channel() {
    EXPECT_EQ(pipe(to_child_), 0);
    EXPECT_EQ(pipe(to_parent_), 0);
  }
  bool Tell(char c) { return write(to_child_[1], &c, 1) == 1; }        // parent -> child
  bool Report(char c) { return write(to_parent_[1], &c, 1) == 1; }     // child -> parent
  char Heard() {                                                        // in the child
    char c = 0;
    return read(to_child_[0], &c, 1) == 1 ? c : 0;
  }
  char Awaited() {                                                      // in the parent
    char c = 0;
    return read(to_parent_[0], &c, 1) == 1 ? c : 0;
  }
  // Whether the child reported something within ms (a negative check: a slow machine can only
  // make it pass, never fail).
  bool ReportedWithin(int ms) {
    pollfd fd{to_parent_[0], POLLIN, 0};
    return poll(&fd, 1, ms) == 1;
  }

 private:
  int to_child_[2];
  int to_parent_[2];
};

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    static int serial = 0;
    name_ = "fake-cuda-ckpt-" + std::to_string(getpid()) + "-" + std::to_string(++serial);
    shm_unlink(("/" + name_).c_str());
    setenv("FAKE_CUDA_SHARED_DEVICE", name_.c_str(), 1);  // read by the next fake_cuda_reset()
  }

  void TearDown() override {
    children_.KillAll();
    for (const char* knob : {"FAKE_CUDA_SHARED_DEVICE", "FAKE_CUDA_CHECKPOINT_MS_PER_GIB",
                             "FAKE_CUDA_CHECKPOINT_REFUSE", "FAKE_CUDA_CHECKPOINT_FAIL",
                             "FAKE_CUDA_HIDDEN_BLOCKERS"}) {
      unsetenv(knob);
    }
    fake_cuda_reset();
    shm_unlink(("/" + name_).c_str());
  }

  // A fresh start of the fake (reading the environment), cuInit and the primary context.
  static bool Start() {
    fake_cuda_reset();
    CUcontext ctx = nullptr;
    return cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
           cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
  }

  pid_t Spawn(std::function<int()> body) { return children_.Spawn(std::move(body)); }
  int WaitExit(pid_t pid) { return children_.WaitExit(pid); }

  void Kill(pid_t pid) {
    kill(pid, SIGKILL);
    EXPECT_EQ(WaitExit(pid), 128 + SIGKILL);
  }

  // A child that allocates bytes, reports 'r', and then does what the channel tells it:
  // 'c' a driver call (cuMemGetInfo), reporting 'd' with its result's success, 'x' exit 0.
  pid_t Holder(Channel& channel, size_t bytes) {
    return Spawn([&channel, bytes] {
      CUdeviceptr p = 0;
      if (!Start() || (bytes > 0 && cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS)) return 1;
      channel.Report('r');
      for (;;) {
        switch (channel.Heard()) {
          case 'c': {
            size_t free = 0, total = 0;
            channel.Report(cuMemGetInfo_v2(&free, &total) == CUDA_SUCCESS ? 'd' : 'e');
            break;
          }
          case 'x': return 0;
          default: return 2;
        }
      }
    });
  }

  static CUprocessState State(pid_t pid) {
    CUprocessState state = CU_PROCESS_STATE_FAILED;
    EXPECT_EQ(cuCheckpointProcessGetState(pid, &state), CUDA_SUCCESS);
    return state;
  }

  static CUresult Suspend(pid_t pid) {
    if (CUresult rc = cuCheckpointProcessLock(pid, nullptr)) return rc;
    return cuCheckpointProcessCheckpoint(pid, nullptr);
  }

  static CUresult Resume(pid_t pid) {
    if (CUresult rc = cuCheckpointProcessRestore(pid, nullptr)) return rc;
    return cuCheckpointProcessUnlock(pid, nullptr);
  }

  std::string name_;
  ChildProcesses children_;
};

TEST_F(Checkpoint, StatesOfProcessesThatAreNotThere) {
  fake_cuda_reset();
  CUprocessState state;
  EXPECT_EQ(cuCheckpointProcessGetState(getpid(), &state), CUDA_ERROR_NOT_INITIALIZED)
      << "the caller must have called cuInit";
  ASSERT_TRUE(Start());
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(cuCheckpointProcessGetState(getpid(), nullptr), CUDA_ERROR_INVALID_VALUE);
  const pid_t gone = Spawn([] { return 0; });  // never used the driver
  EXPECT_EQ(WaitExit(gone), 0);
  EXPECT_EQ(cuCheckpointProcessGetState(gone, &state), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCheckpointProcessLock(gone, nullptr), CUDA_ERROR_INVALID_VALUE);
  int tid = 0;
  EXPECT_EQ(cuCheckpointProcessGetRestoreThreadId(getpid(), &tid), CUDA_SUCCESS);
  EXPECT_GT(tid, 0);
}

TEST_F(Checkpoint, TheCheckpointApiIsFoundByCuGetProcAddress) {
  ASSERT_TRUE(Start());
  void* lock = nullptr;
  CUdriverProcAddressQueryResult found{};
  ASSERT_EQ(cuGetProcAddress_v2("cuCheckpointProcessLock", &lock, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &found),
            CUDA_SUCCESS);
  EXPECT_EQ(lock, reinterpret_cast<void*>(&cuCheckpointProcessLock));
}

TEST_F(Checkpoint, ItsResultsHaveTheDriversNames) {
  const char* name = nullptr;
  const char* text = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_ILLEGAL_STATE, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_ILLEGAL_STATE");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(12345), &name), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetErrorString(CUDA_SUCCESS, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Checkpoint, ALockHoldsTheTargetsCallsUntilTheUnlock) {
  Channel channel;
  const pid_t child = Holder(channel, kGiB);
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'r');
  ASSERT_EQ(cuCheckpointProcessLock(child, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(State(child), CU_PROCESS_STATE_LOCKED);
  ASSERT_TRUE(channel.Tell('c'));
  EXPECT_FALSE(channel.ReportedWithin(200)) << "a locked process's call returned";
  ASSERT_EQ(cuCheckpointProcessUnlock(child, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(channel.Awaited(), 'd');
  EXPECT_EQ(State(child), CU_PROCESS_STATE_RUNNING);
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(child), 0);
}

TEST_F(Checkpoint, ACheckpointMovesTheMemoryOffTheDeviceAndARestoreBringsItBack) {
  Channel channel;
  const pid_t child = Holder(channel, 10 * kGiB);
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'r');
  const size_t held = 10 * kGiB + kContextBytes;
  EXPECT_EQ(fake_cuda_process_used(child, 0), held);
  EXPECT_EQ(fake_cuda_device_used_all(0), held + kContextBytes);
  CUdeviceptr big = 0;
  EXPECT_EQ(cuMemAlloc_v2(&big, 8 * kGiB), CUDA_ERROR_OUT_OF_MEMORY) << "the child holds the device";

  ASSERT_EQ(Suspend(child), CUDA_SUCCESS);
  EXPECT_EQ(State(child), CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(fake_cuda_process_used(child, 0), 0u);
  EXPECT_EQ(fake_cuda_process_checkpointed(child, 0), held);
  EXPECT_EQ(fake_cuda_device_used_all(0), kContextBytes);
  ASSERT_EQ(cuMemAlloc_v2(&big, 8 * kGiB), CUDA_SUCCESS) << "its memory is ours to take";
  ASSERT_EQ(cuMemFree_v2(big), CUDA_SUCCESS);

  ASSERT_EQ(cuCheckpointProcessRestore(child, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(State(child), CU_PROCESS_STATE_LOCKED);
  EXPECT_EQ(fake_cuda_process_used(child, 0), held);
  EXPECT_EQ(fake_cuda_process_checkpointed(child, 0), 0u);
  ASSERT_EQ(cuCheckpointProcessUnlock(child, nullptr), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('c'));
  EXPECT_EQ(channel.Awaited(), 'd') << "the child goes on";
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(child), 0);
  EXPECT_EQ(fake_cuda_device_used_all(0), kContextBytes) << "what the child held went with it";
}

TEST_F(Checkpoint, ARestoreThatDoesNotFitFailsAndTheProcessStaysCheckpointedForGood) {
  Channel channel;
  const pid_t child = Holder(channel, 10 * kGiB);
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'r');
  ASSERT_EQ(Suspend(child), CUDA_SUCCESS);
  CUdeviceptr big = 0;
  ASSERT_EQ(cuMemAlloc_v2(&big, 8 * kGiB), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessRestore(child, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(State(child), CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(fake_cuda_process_used(child, 0), 0u);
  ASSERT_EQ(cuMemFree_v2(big), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessRestore(child, nullptr), CUDA_ERROR_OPERATING_SYSTEM)
      << "as on driver 580: after an out-of-memory restore the process cannot be restored";
  EXPECT_EQ(cuCheckpointProcessUnlock(child, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  Kill(child);
  CUprocessState state;
  EXPECT_EQ(cuCheckpointProcessGetState(child, &state), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fake_cuda_device_used_all(0), kContextBytes);
}

TEST_F(Checkpoint, OperationsOutOfOrderAreIllegal) {
  ASSERT_TRUE(Start());
  const pid_t self = getpid();  // a process may act on itself (its other threads' calls wait)
  EXPECT_EQ(cuCheckpointProcessCheckpoint(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessRestore(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessUnlock(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCheckpointProcessLock(self, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessLock(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessRestore(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(self, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used_all(0), 0u);
  EXPECT_EQ(fake_cuda_device_used(0), kContextBytes) << "this process's own view is unchanged";
  EXPECT_EQ(cuCheckpointProcessCheckpoint(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessUnlock(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessLock(self, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(Resume(self), CUDA_SUCCESS);
  EXPECT_EQ(State(self), CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(fake_cuda_device_used_all(0), kContextBytes);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, kGiB), CUDA_SUCCESS);
}

TEST_F(Checkpoint, ReservedArgumentsMustBeZeroAndGpuMigrationIsNotModelled) {
  ASSERT_TRUE(Start());
  CUcheckpointLockArgs lock{};
  lock.reserved0 = 1;
  EXPECT_EQ(cuCheckpointProcessLock(getpid(), &lock), CUDA_ERROR_INVALID_VALUE);
  lock = {};
  lock.timeoutMs = 1000;
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), &lock), CUDA_SUCCESS);
  CUcheckpointCheckpointArgs checkpoint{};
  checkpoint.reserved[3] = 1;
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), &checkpoint), CUDA_ERROR_INVALID_VALUE);
  checkpoint = {};
  ASSERT_EQ(cuCheckpointProcessCheckpoint(getpid(), &checkpoint), CUDA_SUCCESS);
  CUcheckpointGpuPair pair{};
  CUcheckpointRestoreArgs restore{};
  restore.gpuPairs = &pair;
  restore.gpuPairsCount = 1;
  EXPECT_EQ(cuCheckpointProcessRestore(getpid(), &restore), CUDA_ERROR_NOT_SUPPORTED);
  restore = {};
  EXPECT_EQ(cuCheckpointProcessRestore(getpid(), &restore), CUDA_SUCCESS);
  CUcheckpointUnlockArgs unlock{};
  EXPECT_EQ(cuCheckpointProcessUnlock(getpid(), &unlock), CUDA_SUCCESS);
}

TEST_F(Checkpoint, ProcessesWithManagedOrIpcMemoryAreRefusedAndStayLocked) {
  ASSERT_TRUE(Start());
  CUdeviceptr managed = 0, exported = 0;
  ASSERT_EQ(cuMemAllocManaged(&managed, 4 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_LOCKED);
  ASSERT_EQ(cuCheckpointProcessUnlock(getpid(), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(managed), CUDA_SUCCESS);
  ASSERT_EQ(Suspend(getpid()), CUDA_SUCCESS) << "without the managed memory it is accepted";
  ASSERT_EQ(Resume(getpid()), CUDA_SUCCESS);

  ASSERT_EQ(cuMemAlloc_v2(&exported, 4 * kMiB), CUDA_SUCCESS);
  CUipcMemHandle handle;
  ASSERT_EQ(cuIpcGetMemHandle(&handle, exported), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuCheckpointProcessUnlock(getpid(), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(exported), CUDA_SUCCESS);
  ASSERT_EQ(Suspend(getpid()), CUDA_SUCCESS);
  ASSERT_EQ(Resume(getpid()), CUDA_SUCCESS);
}

TEST_F(Checkpoint, AnImporterOfIpcMemoryIsRefusedToo) {
  Channel channel;
  CUipcMemHandle handle{};
  int handle_pipe[2];
  ASSERT_EQ(pipe(handle_pipe), 0);
  const pid_t exporter = Spawn([&] {
    CUdeviceptr p = 0;
    CUipcMemHandle h;
    if (!Start() || cuMemAlloc_v2(&p, 4 * kMiB) != CUDA_SUCCESS || cuIpcGetMemHandle(&h, p) != CUDA_SUCCESS) return 1;
    if (write(handle_pipe[1], &h, sizeof h) != sizeof h) return 2;
    return channel.Heard() == 'x' ? 0 : 3;
  });
  ASSERT_EQ(read(handle_pipe[0], &handle, sizeof handle), static_cast<ssize_t>(sizeof handle));
  ASSERT_TRUE(Start());
  CUdeviceptr imported = 0;
  ASSERT_EQ(cuIpcOpenMemHandle_v2(&imported, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuCheckpointProcessUnlock(getpid(), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuIpcCloseMemHandle(imported), CUDA_SUCCESS);
  EXPECT_EQ(Suspend(getpid()), CUDA_SUCCESS);
  EXPECT_EQ(Resume(getpid()), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(exporter), 0);
}

TEST_F(Checkpoint, TheRefusalsAreKnobsOfTheCaller) {
  setenv("FAKE_CUDA_CHECKPOINT_REFUSE", "none", 1);
  ASSERT_TRUE(Start());
  CUdeviceptr managed = 0;
  ASSERT_EQ(cuMemAllocManaged(&managed, 4 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(Suspend(getpid()), CUDA_SUCCESS);
  EXPECT_EQ(Resume(getpid()), CUDA_SUCCESS);
  setenv("FAKE_CUDA_CHECKPOINT_REFUSE", "ipc", 1);
  ASSERT_TRUE(Start());
  ASSERT_EQ(cuMemAllocManaged(&managed, 4 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(Suspend(getpid()), CUDA_SUCCESS) << "managed memory is no longer refused";
  EXPECT_EQ(Resume(getpid()), CUDA_SUCCESS);
}

TEST_F(Checkpoint, ARefusalMayLeaveTheProcessFailedAsTheDriverWarns) {
  setenv("FAKE_CUDA_CHECKPOINT_REFUSE", "managed,failed", 1);
  ASSERT_TRUE(Start());
  CUdeviceptr managed = 0;
  ASSERT_EQ(cuMemAllocManaged(&managed, 4 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_FAILED);
  EXPECT_EQ(cuCheckpointProcessUnlock(getpid(), nullptr), CUDA_ERROR_ILLEGAL_STATE) << "nothing to undo it with";

  setenv("FAKE_CUDA_CHECKPOINT_REFUSE", "failed", 1);  // alone: what is refused stays the default
  ASSERT_TRUE(Start());
  CUdeviceptr exported = 0;
  CUipcMemHandle handle;
  ASSERT_EQ(cuMemAlloc_v2(&exported, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(cuIpcGetMemHandle(&handle, exported), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_FAILED);
}

TEST_F(Checkpoint, WhatAProcessHoldsUnseenIsRefusedAsWell) {
  // Managed memory no allocation call showed (a library mapping it by itself): refused from
  // the first driver call on, with nothing allocated.
  setenv("FAKE_CUDA_HIDDEN_BLOCKERS", "managed", 1);
  Channel channel;
  const pid_t target = Holder(channel, 4 * kMiB);
  ASSERT_EQ(channel.Awaited(), 'r');
  unsetenv("FAKE_CUDA_HIDDEN_BLOCKERS");
  ASSERT_TRUE(Start());
  ASSERT_EQ(cuCheckpointProcessLock(target, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(target, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(State(target), CU_PROCESS_STATE_LOCKED);
  ASSERT_EQ(cuCheckpointProcessUnlock(target, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Suspend(getpid()), CUDA_SUCCESS) << "the caller, without the knob, is accepted";
  EXPECT_EQ(Resume(getpid()), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(target), 0);
}

TEST_F(Checkpoint, ACheckpointWaitsForTheWorkTheProcessSubmitted) {
  Channel channel;
  const pid_t child = Spawn([&] {
    static const char image[] = "any bytes";
    CUmodule module = nullptr;
    CUfunction f = nullptr;
    if (!Start() || cuModuleLoadData(&module, image) != CUDA_SUCCESS ||
        cuModuleGetFunction(&f, module, "spin_200000us") != CUDA_SUCCESS ||
        cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) {
      return 1;
    }
    channel.Report('q');
    return channel.Heard() == 'x' ? 0 : 2;
  });
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'q');
  const long long kernel_end = fake_cuda_device_free_at_ns(0);
  EXPECT_GT(kernel_end, monotonic_ns() + 50 * kMs) << "the child's kernel should still be running";
  ASSERT_EQ(Suspend(child), CUDA_SUCCESS);
  EXPECT_GE(monotonic_ns(), kernel_end);
  ASSERT_EQ(Resume(child), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(child), 0);
}

TEST_F(Checkpoint, ALockWithATimeoutGivesUpWhileACallIsInProgress) {
  Channel channel;
  std::uint32_t* word = nullptr;
  const pid_t child = Spawn([&] {
    CUstream stream = nullptr;
    CUdeviceptr device = 0;
    void* pinned = nullptr;
    if (!Start() || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cuMemAlloc_v2(&device, 4 * kMiB) != CUDA_SUCCESS || cuMemHostAlloc(&pinned, 4096, 0) != CUDA_SUCCESS) {
      return 1;
    }
    word = static_cast<std::uint32_t*>(pinned);
    *word = 0;
    // The stream waits for a word this process writes only when told: a copy to pageable
    // memory behind it stays inside the driver until then.
    if (cuStreamWaitValue32_v2(stream, reinterpret_cast<CUdeviceptr>(word), 1, CU_STREAM_WAIT_VALUE_GEQ) !=
        CUDA_SUCCESS) {
      return 2;
    }
    std::thread release([&] {
      if (channel.Heard() == 'w') __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
    });
    char pageable[64];
    channel.Report('r');  // no other driver call of this process from here on
    const CUresult copied = cuMemcpyDtoHAsync_v2(pageable, device, sizeof pageable, stream);
    release.join();
    if (copied != CUDA_SUCCESS) return 3;
    return channel.Heard() == 'x' ? 0 : 4;
  });
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'r');
  while (fake_cuda_process_active_calls(child) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CUcheckpointLockArgs args{};
  args.timeoutMs = 50;
  EXPECT_EQ(cuCheckpointProcessLock(child, &args), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(State(child), CU_PROCESS_STATE_RUNNING);
  ASSERT_TRUE(channel.Tell('w'));
  while (fake_cuda_process_active_calls(child) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(cuCheckpointProcessLock(child, &args), CUDA_SUCCESS) << "nothing in progress now";
  ASSERT_EQ(cuCheckpointProcessUnlock(child, nullptr), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(child), 0);
}

TEST_F(Checkpoint, AKilledCheckpointedProcessHoldsNothing) {
  Channel channel;
  const pid_t child = Holder(channel, 4 * kGiB);
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'r');
  ASSERT_EQ(Suspend(child), CUDA_SUCCESS);
  Kill(child);
  EXPECT_EQ(fake_cuda_process_checkpointed(child, 0), 0u);
  EXPECT_EQ(fake_cuda_device_used_all(0), kContextBytes);
  EXPECT_EQ(cuCheckpointProcessRestore(child, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Checkpoint, ALockedProcessCanBeKilled) {
  Channel channel;
  const pid_t child = Holder(channel, 4 * kGiB);
  ASSERT_TRUE(Start());
  ASSERT_EQ(channel.Awaited(), 'r');
  ASSERT_EQ(cuCheckpointProcessLock(child, nullptr), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('c'));  // its call waits at the lock
  Kill(child);
  EXPECT_EQ(fake_cuda_device_used_all(0), kContextBytes);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(child, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Checkpoint, AnOperationWhoseCallerDiedIsUndone) {
  Channel channel;
  const pid_t target = Holder(channel, 4 * kGiB);
  ASSERT_EQ(channel.Awaited(), 'r');
  const size_t held = 4 * kGiB + kContextBytes;
  // Callers whose copy takes 100 s: killed half-way.
  auto caller = [&](bool restore) {
    return Spawn([target, restore] {
      setenv("FAKE_CUDA_CHECKPOINT_MS_PER_GIB", "25000", 1);
      if (!Start()) return 1;
      return (restore ? cuCheckpointProcessRestore(target, nullptr) : Suspend(target)) == CUDA_SUCCESS ? 0 : 2;
    });
  };
  ASSERT_TRUE(Start());
  const pid_t checkpointing = caller(false);
  while (fake_cuda_process_operation(target) != checkpointing || State(target) != CU_PROCESS_STATE_LOCKED) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Kill(checkpointing);
  EXPECT_EQ(State(target), CU_PROCESS_STATE_LOCKED) << "back to where the checkpoint started";
  EXPECT_EQ(fake_cuda_process_operation(target), 0);
  EXPECT_EQ(fake_cuda_process_used(target, 0), held);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(target, nullptr), CUDA_SUCCESS);

  const pid_t restoring = caller(true);
  while (fake_cuda_process_operation(target) != restoring) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(fake_cuda_process_used(target, 0), held) << "a restore takes the memory first";
  Kill(restoring);
  EXPECT_EQ(State(target), CU_PROCESS_STATE_CHECKPOINTED) << "back to where the restore started";
  EXPECT_EQ(fake_cuda_process_used(target, 0), 0u);
  EXPECT_EQ(fake_cuda_process_checkpointed(target, 0), held);
  ASSERT_EQ(Resume(target), CUDA_SUCCESS);
  ASSERT_TRUE(channel.Tell('c'));
  EXPECT_EQ(channel.Awaited(), 'd');
  ASSERT_TRUE(channel.Tell('x'));
  EXPECT_EQ(WaitExit(target), 0);
}

TEST_F(Checkpoint, InjectedFailuresLeaveTheStateOrFailTheProcess) {
  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "lock,unlock", 1);
  ASSERT_TRUE(Start());
  EXPECT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_RUNNING);

  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "checkpoint,restore", 1);
  ASSERT_TRUE(Start());
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_LOCKED);
  EXPECT_EQ(cuCheckpointProcessUnlock(getpid(), nullptr), CUDA_SUCCESS);

  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "checkpoint-fatal", 1);
  ASSERT_TRUE(Start());
  ASSERT_EQ(cuCheckpointProcessLock(getpid(), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(getpid(), nullptr), CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_FAILED);
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_ERROR_ILLEGAL_STATE) << "a FAILED process's calls fail";
  EXPECT_EQ(cuCheckpointProcessUnlock(getpid(), nullptr), CUDA_ERROR_ILLEGAL_STATE);

  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "restore-fatal", 1);
  ASSERT_TRUE(Start());
  ASSERT_EQ(Suspend(getpid()), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessRestore(getpid(), nullptr), CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(State(getpid()), CU_PROCESS_STATE_FAILED);
}

}  // namespace
