// Suspending and resuming a tenant's processes as one unit, against the fake driver's
// checkpoint API: forked children hold device memory on one shared simulated device, the test
// process plays the daemon. What a refusal, an exited process, a reused pid, a restore that no
// longer fits and the driver's failures leave behind; and the thread that runs the jobs.
#include "scheduler/preemption/tenant_suspender.h"

#include <cuda.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/os/process_info.h"
#include "tests/fake_driver/fake_cuda_control.h"

namespace cuslice {
namespace {

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kContext = size_t{512} << 20;  // FAKE_CUDA_CONTEXT_BYTES default
using Kind = SuspendOutcome::Kind;
using State = CheckpointApi::State;

class TenantSuspenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int serial = 0;
    name_ = "cuslice-suspender-" + std::to_string(getpid()) + "-" + std::to_string(++serial);
    shm_unlink(("/" + name_).c_str());
    setenv("FAKE_CUDA_SHARED_DEVICE", name_.c_str(), 1);
    fake_cuda_reset();
    api_ = CheckpointApi::load();
    ASSERT_TRUE(api_->available()) << api_->why();
  }

  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (const char* knob : {"FAKE_CUDA_SHARED_DEVICE", "FAKE_CUDA_CHECKPOINT_FAIL", "FAKE_CUDA_CHECKPOINT_REFUSE"})
      unsetenv(knob);
    fake_cuda_reset();
    shm_unlink(("/" + name_).c_str());
  }

  // Takes the knobs set since (the fake reads them at a reset) and initialises it again.
  void Restart() {
    fake_cuda_reset();
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }

  // A child that holds gib of device memory (managed memory when asked) until killed; returns
  // once it does.
  SuspendProcess Holder(size_t gib, bool managed = false) {
    int ready[2];
    EXPECT_EQ(pipe(ready), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      fake_cuda_reset();
      CUcontext ctx = nullptr;
      CUdeviceptr p = 0;
      if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
          cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        _exit(1);
      }
      const CUresult rc = managed ? cuMemAllocManaged(&p, gib * kGiB, CU_MEM_ATTACH_GLOBAL)
                                  : cuMemAlloc_v2(&p, gib * kGiB);
      if (rc != CUDA_SUCCESS || write(ready[1], "r", 1) != 1) _exit(2);
      for (;;) pause();
    }
    children_.push_back(pid);
    char byte = 0;
    EXPECT_EQ(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    close(ready[1]);
    return {pid, process_start_time(pid).value_or(0)};
  }

  void Kill(int32_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::erase(children_, pid);
  }

  static SuspendJob Job(SuspendJob::Kind kind, uint32_t tenant, std::vector<SuspendProcess> processes) {
    SuspendJob job;
    job.kind = kind;
    job.tenant = tenant;
    job.processes = std::move(processes);
    return job;
  }

  SuspendOutcome Run(SuspendJob::Kind kind, std::vector<SuspendProcess> processes) {
    return run_suspend_job(*api_, Job(kind, 7, std::move(processes)), 1000);
  }

  SuspendOutcome Run(SuspendJob job) { return run_suspend_job(*api_, job, 1000); }

  // Whether the process has exited (a child of this test: it stays a zombie until reaped).
  static bool Exited(int32_t pid) {
    const std::optional<uint64_t> started = process_start_time(pid);
    if (!started) return true;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) return true;
    int got_pid = 0;
    char comm[256] = {}, state = 0;
    const bool read = std::fscanf(f, "%d %255s %c", &got_pid, comm, &state) == 3;
    std::fclose(f);
    return !read || state == 'Z' || state == 'X';
  }

  State StateOf(int32_t pid) { return api_->state(pid); }

  std::string name_;
  std::vector<pid_t> children_;
  std::unique_ptr<CheckpointApi> api_;
};

TEST_F(TenantSuspenderTest, ATenantIsSuspendedAndResumedAsAUnit) {
  const SuspendProcess a = Holder(4), b = Holder(6);
  EXPECT_EQ(fake_cuda_device_used_all(0), 10 * kGiB + 2 * kContext);
  SuspendOutcome out = Run(SuspendJob::Kind::kSuspend, {a, b});
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  EXPECT_EQ(out.tenant, 7u);
  EXPECT_TRUE(out.gone.empty());
  EXPECT_EQ(StateOf(a.pid), State::kCheckpointed);
  EXPECT_EQ(StateOf(b.pid), State::kCheckpointed);
  EXPECT_EQ(fake_cuda_device_used_all(0), 0u);
  out = Run(SuspendJob::Kind::kResume, {a, b});
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  EXPECT_EQ(StateOf(a.pid), State::kRunning);
  EXPECT_EQ(StateOf(b.pid), State::kRunning);
  EXPECT_EQ(fake_cuda_device_used_all(0), 10 * kGiB + 2 * kContext);
}

TEST_F(TenantSuspenderTest, OneProcessTheDriverCannotCheckpointLeavesTheWholeTenantRunning) {
  const SuspendProcess plain = Holder(4), managed = Holder(2, /*managed=*/true);
  const SuspendOutcome out = Run(SuspendJob::Kind::kSuspend, {plain, managed});
  EXPECT_EQ(out.kind, Kind::kRefused);
  EXPECT_NE(out.reason.find("checkpoint of process " + std::to_string(managed.pid) +
                            " failed: CUDA_ERROR_NOT_SUPPORTED (operation not supported)"),
            std::string::npos)
      << out.reason;
  EXPECT_EQ(StateOf(plain.pid), State::kRunning) << "checkpointed first, restored again";
  EXPECT_EQ(StateOf(managed.pid), State::kRunning);
  EXPECT_EQ(fake_cuda_device_used_all(0), 6 * kGiB + 2 * kContext);
}

TEST_F(TenantSuspenderTest, AFailedLockLeavesTheWholeTenantRunning) {
  const SuspendProcess a = Holder(1), b = Holder(1);
  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "lock", 1);
  Restart();
  const SuspendOutcome out = Run(SuspendJob::Kind::kSuspend, {a, b});
  EXPECT_EQ(out.kind, Kind::kRefused);
  EXPECT_NE(out.reason.find("lock of process " + std::to_string(a.pid) + " failed: CUDA_ERROR_OPERATING_SYSTEM"),
            std::string::npos)
      << out.reason;
  EXPECT_EQ(StateOf(a.pid), State::kRunning);
  EXPECT_EQ(StateOf(b.pid), State::kRunning);
}

TEST_F(TenantSuspenderTest, ExitedProcessesAndReusedPidsAreSkipped) {
  const SuspendProcess a = Holder(2), b = Holder(2), c = Holder(2);
  Kill(b.pid);
  SuspendProcess reused = c;
  reused.start_time += 1;  // as if c's pid now named a later process
  SuspendOutcome out = Run(SuspendJob::Kind::kSuspend, {a, b, reused});
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  EXPECT_EQ(out.gone, (std::vector<int32_t>{b.pid, c.pid}));
  EXPECT_EQ(StateOf(a.pid), State::kCheckpointed);
  EXPECT_EQ(StateOf(c.pid), State::kRunning) << "not the tenant's process: untouched";
  Kill(a.pid);
  out = Run(SuspendJob::Kind::kResume, {a});
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  EXPECT_EQ(out.gone, std::vector<int32_t>{a.pid}) << "a suspended process killed meanwhile";
}

TEST_F(TenantSuspenderTest, ARestoreThatNoLongerFitsFailsAndSaysWhatToDo) {
  const SuspendProcess a = Holder(6), b = Holder(6);
  ASSERT_EQ(Run(SuspendJob::Kind::kSuspend, {a, b}).kind, Kind::kDone);
  const SuspendProcess squatter = Holder(8);  // 16 GiB device: a fits again (6.5), b does not
  const SuspendOutcome out = Run(SuspendJob::Kind::kResume, {a, b});
  EXPECT_EQ(out.kind, Kind::kFailed);
  EXPECT_EQ(out.stuck, std::vector<int32_t>{b.pid});
  EXPECT_NE(out.reason.find("restore of process " + std::to_string(b.pid) + " failed: CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos)
      << out.reason;
  EXPECT_NE(out.reason.find("kill " + std::to_string(b.pid)), std::string::npos) << out.reason;
  EXPECT_EQ(StateOf(a.pid), State::kRunning) << "the others run";
  EXPECT_EQ(StateOf(b.pid), State::kCheckpointed);
  Kill(squatter.pid);
}

TEST_F(TenantSuspenderTest, ARestoreTheDriverRefusesForNowKeepsTheTenantSuspended) {
  const SuspendProcess a = Holder(2), b = Holder(2);
  ASSERT_EQ(Run(SuspendJob::Kind::kSuspend, {a, b}).kind, Kind::kDone);
  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "restore", 1);
  Restart();
  SuspendOutcome out = Run(SuspendJob::Kind::kResume, {a, b});
  EXPECT_EQ(out.kind, Kind::kDeferred) << out.reason;
  EXPECT_EQ(StateOf(a.pid), State::kCheckpointed);
  EXPECT_EQ(StateOf(b.pid), State::kCheckpointed);
  unsetenv("FAKE_CUDA_CHECKPOINT_FAIL");
  Restart();
  out = Run(SuspendJob::Kind::kResume, {a, b});
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  EXPECT_EQ(StateOf(b.pid), State::kRunning);
}

TEST_F(TenantSuspenderTest, AProcessTheDriverLeftFailedIsReportedAndTheOthersRun) {
  const SuspendProcess a = Holder(2), b = Holder(2);
  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "checkpoint-fatal", 1);
  Restart();
  const SuspendOutcome out = Run(SuspendJob::Kind::kSuspend, {a, b});
  EXPECT_EQ(out.kind, Kind::kFailed);
  EXPECT_EQ(out.stuck, std::vector<int32_t>{a.pid});
  EXPECT_NE(out.reason.find("stop it and start the job again"), std::string::npos) << out.reason;
  EXPECT_EQ(StateOf(a.pid), State::kFailed);
  EXPECT_EQ(StateOf(b.pid), State::kRunning) << "locked, then unlocked again";
}

TEST_F(TenantSuspenderTest, ProcessesNamedToBeStoppedAreKilledAndTheOthersSuspended) {
  const SuspendProcess keep = Holder(4), says = Holder(2, /*managed=*/true);
  SuspendJob job = Job(SuspendJob::Kind::kSuspend, 7, {keep});
  job.stop = {says};
  const SuspendOutcome out = Run(job);
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  ASSERT_EQ(out.stopped.size(), 1u);
  EXPECT_EQ(out.stopped[0].pid, says.pid);
  EXPECT_EQ(out.stopped[0].why, "");
  EXPECT_TRUE(Exited(says.pid));
  EXPECT_EQ(StateOf(says.pid), State::kGone);
  EXPECT_EQ(StateOf(keep.pid), State::kCheckpointed);
  EXPECT_EQ(fake_cuda_device_used_all(0), 0u) << "the stopped one's memory went with it";
}

TEST_F(TenantSuspenderTest, WithStopRefusedWhatTheCheckpointRefusesIsStoppedAndTheRestSuspended) {
  const SuspendProcess plain = Holder(4), managed = Holder(2, /*managed=*/true);
  SuspendJob job = Job(SuspendJob::Kind::kSuspend, 7, {plain, managed});
  job.stop_refused = true;
  const SuspendOutcome out = Run(job);
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  ASSERT_EQ(out.stopped.size(), 1u);
  EXPECT_EQ(out.stopped[0].pid, managed.pid);
  EXPECT_NE(out.stopped[0].why.find("checkpoint of process " + std::to_string(managed.pid) +
                                    " failed: CUDA_ERROR_NOT_SUPPORTED"),
            std::string::npos)
      << out.stopped[0].why;
  EXPECT_TRUE(Exited(managed.pid));
  EXPECT_EQ(StateOf(plain.pid), State::kCheckpointed);
  EXPECT_EQ(fake_cuda_device_used_all(0), 0u);
}

TEST_F(TenantSuspenderTest, WithStopRefusedAProcessTheRefusalLeftFailedIsStoppedToo) {
  // The driver "does not attempt to keep the process in a good state" after such an error.
  setenv("FAKE_CUDA_CHECKPOINT_REFUSE", "managed,failed", 1);
  Restart();
  const SuspendProcess plain = Holder(4), managed = Holder(2, /*managed=*/true);
  SuspendJob job = Job(SuspendJob::Kind::kSuspend, 7, {managed, plain});
  SuspendOutcome out = Run(job);
  EXPECT_EQ(out.kind, Kind::kFailed) << "without stop_refused: reported, the others run";
  EXPECT_EQ(out.stuck, std::vector<int32_t>{managed.pid});
  EXPECT_EQ(StateOf(managed.pid), State::kFailed);
  EXPECT_EQ(StateOf(plain.pid), State::kRunning);
  Kill(managed.pid);

  const SuspendProcess again = Holder(2, /*managed=*/true);
  job = Job(SuspendJob::Kind::kSuspend, 7, {again, plain});
  job.stop_refused = true;
  out = Run(job);
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  ASSERT_EQ(out.stopped.size(), 1u);
  EXPECT_EQ(out.stopped[0].pid, again.pid);
  EXPECT_NE(out.stopped[0].why.find("the driver left it FAILED"), std::string::npos) << out.stopped[0].why;
  EXPECT_TRUE(Exited(again.pid));
  EXPECT_EQ(StateOf(plain.pid), State::kCheckpointed);
  unsetenv("FAKE_CUDA_CHECKPOINT_REFUSE");
}

TEST_F(TenantSuspenderTest, AFailureOfTheSchedulersOwnStopsNobody) {
  // Not the process's doing (a lock the driver fails for the caller): undone, nobody killed.
  const SuspendProcess a = Holder(1), b = Holder(1);
  setenv("FAKE_CUDA_CHECKPOINT_FAIL", "lock", 1);
  Restart();
  SuspendJob job = Job(SuspendJob::Kind::kSuspend, 7, {a, b});
  job.stop_refused = true;
  const SuspendOutcome out = Run(job);
  EXPECT_EQ(out.kind, Kind::kRefused) << out.reason;
  EXPECT_TRUE(out.stopped.empty());
  EXPECT_FALSE(Exited(a.pid));
  EXPECT_EQ(StateOf(a.pid), State::kRunning);
  EXPECT_EQ(StateOf(b.pid), State::kRunning);
}

TEST_F(TenantSuspenderTest, AProcessWithoutCudaStateIsLeftAloneAndNamed) {
  // Registered with the scheduler, but not yet a CUDA process: nothing of it is on the GPU.
  const pid_t idle = fork();
  if (idle == 0) {
    for (;;) pause();
  }
  children_.push_back(idle);
  const SuspendProcess a = Holder(2);
  const SuspendOutcome out = Run(SuspendJob::Kind::kSuspend, {a, {idle, process_start_time(idle).value_or(0)}});
  EXPECT_EQ(out.kind, Kind::kDone) << out.reason;
  EXPECT_EQ(out.unknown, std::vector<int32_t>{idle});
  EXPECT_TRUE(out.gone.empty());
  EXPECT_EQ(StateOf(a.pid), State::kCheckpointed);
}

TEST_F(TenantSuspenderTest, StoppingAProcessNeverHitsAReusedPid) {
  const SuspendProcess a = Holder(1);
  EXPECT_EQ(stop_process(a.pid, a.start_time + 1, 1000), std::nullopt) << "another process now: left alone";
  EXPECT_FALSE(Exited(a.pid));
  EXPECT_EQ(stop_process(a.pid, a.start_time, 1000), std::nullopt);
  EXPECT_TRUE(Exited(a.pid));
  Kill(a.pid);
  EXPECT_EQ(stop_process(a.pid, a.start_time, 1000), std::nullopt) << "gone already";
}

TEST_F(TenantSuspenderTest, WithoutTheApiNothingIsTouched) {
  const SuspendProcess a = Holder(1);
  std::unique_ptr<CheckpointApi> none = CheckpointApi::load("libcuda-does-not-exist.so.1");
  EXPECT_FALSE(none->available());
  EXPECT_NE(none->why().find("cannot load libcuda-does-not-exist.so.1"), std::string::npos) << none->why();
  const SuspendOutcome out = run_suspend_job(*none, Job(SuspendJob::Kind::kSuspend, 1, {a}), 100);
  EXPECT_EQ(out.kind, Kind::kRefused);
  EXPECT_EQ(StateOf(a.pid), State::kRunning);
}

TEST_F(TenantSuspenderTest, TheThreadRunsJobsInOrderAndSignalsEachOutcome) {
  const SuspendProcess a = Holder(2), b = Holder(2);
  TenantSuspender suspender(*api_, 1000);
  suspender.submit(Job(SuspendJob::Kind::kSuspend, 1, {a}));
  suspender.submit(Job(SuspendJob::Kind::kSuspend, 2, {b}));
  suspender.submit(Job(SuspendJob::Kind::kResume, 1, {a}));
  EXPECT_EQ(suspender.busy(), 3u);
  std::vector<SuspendOutcome> outcomes;
  while (outcomes.size() < 3) {
    pollfd fd{suspender.event_fd(), POLLIN, 0};
    ASSERT_EQ(poll(&fd, 1, 30'000), 1);
    for (SuspendOutcome& o : suspender.take()) outcomes.push_back(std::move(o));
  }
  EXPECT_EQ(suspender.busy(), 0u);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].tenant, 1u);
  EXPECT_EQ(outcomes[0].job, SuspendJob::Kind::kSuspend);
  EXPECT_EQ(outcomes[1].tenant, 2u);
  EXPECT_EQ(outcomes[2].job, SuspendJob::Kind::kResume);
  for (const SuspendOutcome& o : outcomes) EXPECT_EQ(o.kind, Kind::kDone) << o.reason;
  EXPECT_EQ(StateOf(a.pid), State::kRunning);
  EXPECT_EQ(StateOf(b.pid), State::kCheckpointed);
}

}  // namespace
}  // namespace cuslice
