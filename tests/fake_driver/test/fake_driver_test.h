// Shared set-up of the fake driver's tests: every test starts from a fresh process state.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/fake_driver/fake_cuda_control.h"

inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kGiB = size_t{1} << 30;
inline constexpr size_t kChunk = 2 * kMiB;
inline constexpr size_t kContextBytes = 512 * kMiB;  // FAKE_CUDA_CONTEXT_BYTES default

// Sets FAKE_CUDA_* variables for one test and resets the fake so that it reads them; restores
// the environment and resets again at the end.
class ScopedKnobs {
 public:
  ScopedKnobs(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const auto& [name, value] : values) {
      setenv(name, value, 1);
      names_.push_back(name);
    }
    fake_cuda_reset();
  }
  ~ScopedKnobs() {
    for (const char* name : names_) unsetenv(name);
    fake_cuda_reset();
  }

 private:
  std::vector<const char*> names_;
};

// The child processes a test forks: each one waited for, and those still running at the end
// killed, so that no test leaves a process behind.
class ChildProcesses {
 public:
  ~ChildProcesses() { KillAll(); }
  // Forks a process that exits with what body returns.
  pid_t Spawn(std::function<int()> body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    Adopt(pid);
    return pid;
  }
  // A child forked elsewhere, to be killed at the end if it still runs.
  void Adopt(pid_t pid) { children_.push_back(pid); }
  // Its exit status, or 128 + the signal that ended it.
  int WaitExit(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::erase(children_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void KillAll() {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    children_.clear();
  }

 private:
  std::vector<pid_t> children_;
};

class FakeDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda_reset();
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
  void TearDown() override { fake_cuda_reset(); }

  // Retains dev's primary context and makes it current, as the runtime does.
  static CUcontext UsePrimary(int dev = 0) {
    CUcontext ctx = nullptr;
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
  }

  static size_t Used(int dev = 0) { return fake_cuda_device_used(dev); }
  static size_t UsedBy(fake_cuda_charge charge, int dev = 0) {
    return fake_cuda_device_used_by(dev, charge);
  }
};

// For tests of simulated execution: the primary context current, a module whose functions
// "spin_<N>us" run for N us, and one-line launches and markers.
class KernelTimeTest : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    ctx_ = UsePrimary();
    static const char image[] = "any bytes";
    ASSERT_EQ(cuModuleLoadData(&module_, image), CUDA_SUCCESS);
  }

  CUfunction Kernel(const char* name) {
    CUfunction f = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&f, module_, name), CUDA_SUCCESS);
    return f;
  }

  static CUresult Launch(CUfunction f, CUstream stream) {
    return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr);
  }

  // An event recorded on stream now: it completes when the work queued before it does.
  static CUevent Marker(CUstream stream) {
    CUevent event = nullptr;
    EXPECT_EQ(cuEventCreate(&event, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuEventRecord(event, stream), CUDA_SUCCESS);
    return event;
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
};
