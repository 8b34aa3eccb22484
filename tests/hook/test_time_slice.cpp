// The GPU time slices of a process's channel groups (hook/bookkeeping/channel_groups.h): below a tenant of
// higher priority the hook shortens them to the scheduler's lower_priority_timeslice, and
// gives back the driver's values when that tenant has gone. The kernel is played by the fake
// resource manager (tests/fake_driver/fake_rm_control.h), preloaded after the hook; the
// scheduler is real.
//
//   TimeSlice.*          the scheduler and its tenants hi (high) and lo (low); the processes
//                        are this same binary:
//   TimeSliceChild.Hold  holds a registered CUDA context until stdin closes
//   TimeSliceProbe.Run   registers, allocates two channel groups as libcuda does (one with
//                        each allocation layout), then follows commands on stdin:
//                        "expect A B" (groups 1 and 2 reach A and B us within 10 s; 0: no
//                        such group), "set N" (group 1 set as libcuda sets it), "rawset N"
//                        (group 1 set by an ioctl that bypasses the hook), "free" (group 1 freed), "refuse" (the kernel
//                        refuses later slice controls), "sets N" (that many controls changed a
//                        slice so far); "ok" after each, or a reason and exit 1
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hook/base/nvidia_rm_abi.h"
#include "tests/fake_driver/fake_rm_control.h"
#include "tests/hook/child_process.h"
#include "tests/hook/hook_test_support.h"

using namespace hook_test;
namespace rm = cuslice::rm;

namespace {

constexpr uint32_t kClient = 0xc1d00001;
constexpr uint32_t kGroup1 = 0x5c000015;  // allocated with NVOS64 (libcuda's layout)
constexpr uint32_t kGroup2 = 0x5c000016;  // allocated with NVOS21
constexpr uint32_t kErrGeneric = 0x1f;

template <typename F>
F fake(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

// ---- the probe ----------------------------------------------------------------------------

class TimeSliceProbe : public CudaTest {};

int ioctl_checked(int fd, unsigned long request, void* arg) {
  const int r = ioctl(fd, request, arg);
  if (r != 0) std::printf("ioctl %#lx failed: %d\n", request, r);
  return r;
}

TEST_F(TimeSliceProbe, Run) {
  if (!std::getenv("TEST_PROBE")) GTEST_SKIP() << "run by TimeSlice.*";
  const auto slice = fake<fake_rm_timeslice_fn>("fake_rm_timeslice");
  const auto sets = fake<fake_rm_timeslice_sets_fn>("fake_rm_timeslice_sets");
  const auto status = fake<fake_rm_set_timeslice_status_fn>("fake_rm_set_timeslice_status");
  ASSERT_TRUE(slice && sets && status) << "libfake_nvidia_rm.so is not preloaded after libcuslice.so";
  // A stand-in for /dev/nvidiactl: a character device, open for the process's life.
  const int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  rm::AllocParams64 a64{kClient, kClient, kGroup1, rm::kClassChannelGroup, 0, 0, 0, 0, 0xffffffff};
  ASSERT_EQ(ioctl_checked(fd, _IOWR(rm::kIoctlMagic, rm::kEscRmAlloc, rm::AllocParams64), &a64), 0);
  ASSERT_EQ(a64.status, rm::kOk);
  rm::AllocParams a21{kClient, kClient, kGroup2, rm::kClassChannelGroup, 0, 0, 0xffffffff};
  ASSERT_EQ(ioctl_checked(fd, _IOWR(rm::kIoctlMagic, rm::kEscRmAlloc, rm::AllocParams), &a21), 0);
  ASSERT_EQ(a21.status, rm::kOk);
  std::printf("ready\n");
  std::fflush(stdout);
  std::string cmd;
  uint64_t arg = 0;
  while (std::cin >> cmd) {
    if (cmd == "expect") {
      uint64_t second = 0;
      std::cin >> arg >> second;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (slice(kClient, kGroup1) != arg || slice(kClient, kGroup2) != second) {
        if (std::chrono::steady_clock::now() > until) {
          std::printf("slices %llu and %llu, not %llu and %llu\n",
                      static_cast<unsigned long long>(slice(kClient, kGroup1)),
                      static_cast<unsigned long long>(slice(kClient, kGroup2)), static_cast<unsigned long long>(arg),
                      static_cast<unsigned long long>(second));
          std::exit(1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    } else if (cmd == "set" || cmd == "rawset") {
      std::cin >> arg;
      rm::TimesliceParams p{arg};
      rm::ControlParams c{kClient, kGroup1, rm::kCmdSetTimeslice, 0, reinterpret_cast<uintptr_t>(&p), sizeof p, 0xffffffff};
      const unsigned long request = _IOWR(rm::kIoctlMagic, rm::kEscRmControl, rm::ControlParams);
      int r = -1;
      if (cmd == "set") {
        r = ioctl_checked(fd, request, &c);
      } else {
        // The fake kernel's own ioctl, found through the library that defines fake_rm_timeslice.
        Dl_info info{};
        void* rm_lib = dladdr(reinterpret_cast<void*>(slice), &info) != 0
                           ? dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)
                           : nullptr;
        using Ioctl = int (*)(int, unsigned long, ...);
        const auto raw = rm_lib != nullptr ? reinterpret_cast<Ioctl>(dlsym(rm_lib, "ioctl")) : nullptr;
        if (raw != nullptr) r = raw(fd, request, &c);
      }
      if (r != 0 || c.status != 0) std::exit(1);
    } else if (cmd == "free") {
      rm::FreeParams f{kClient, kClient, kGroup1, 0xffffffff};
      if (ioctl_checked(fd, _IOWR(rm::kIoctlMagic, rm::kEscRmFree, rm::FreeParams), &f) != 0 || f.status != 0)
        std::exit(1);
    } else if (cmd == "refuse") {
      status(kErrGeneric);
    } else if (cmd == "sets") {
      std::cin >> arg;
      if (sets() != arg) {
        std::printf("%lu slice controls, not %llu\n", sets(), static_cast<unsigned long long>(arg));
        std::exit(1);
      }
    } else {
      std::exit(2);
    }
    std::printf("ok\n");
    std::fflush(stdout);
  }
  close(fd);
}

// Holds a CUDA context in its tenant (registered at cuInit) until stdin closes.
class TimeSliceChild : public CudaTest {};

TEST_F(TimeSliceChild, Hold) {
  if (!std::getenv("TEST_HOLD")) GTEST_SKIP() << "run by TimeSlice.*";
  std::printf("ready\n");
  std::fflush(stdout);
  wait_for_stdin_to_close();
}

// ---- the tests ----------------------------------------------------------------------------

class TimeSlice : public ::testing::Test {
 protected:
  void start(const std::string& slice_line = "  lower_priority_timeslice: 300us\n") {
    scheduler_ = std::make_unique<Scheduler>("scheduler:\n" + slice_line +
                                             "tenants:\n"
                                             "  - name: hi\n    allow_env: true\n    priority: high\n"
                                             "  - name: lo\n    allow_env: true\n    priority: low\n");
    ASSERT_TRUE(scheduler_->running()) << "the scheduler did not start";
  }
  void TearDown() override { scheduler_.reset(); }

  Child child(const char* test, const std::string& tenant, const char* role) {
    Child c = spawn({"/proc/self/exe", std::string("--gtest_filter=") + test},
                    {"CUSLICE_SOCKET=" + scheduler_->socket(), "CUSLICE_TENANT=" + tenant, std::string(role) + "=1"},
                    /*preload=*/true, {"CUSLICE_MEMORY_LIMIT"});
    EXPECT_TRUE(read_line(c.out, "ready")) << test << " in " << tenant << " did not start";
    return c;
  }
  Child probe(const std::string& tenant) { return child("TimeSliceProbe.Run", tenant, "TEST_PROBE"); }
  Child hold(const std::string& tenant) { return child("TimeSliceChild.Hold", tenant, "TEST_HOLD"); }
  // One command to the probe; true when it answered ok.
  static bool tell(Child& probe, const std::string& cmd) {
    const std::string line = cmd + "\n";
    if (write(probe.in, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
    return read_line(probe.out, "ok");
  }
  // Long enough for the hook to have looked at its neighbours several times (every 50 ms).
  static void let_it_look() { std::this_thread::sleep_for(std::chrono::milliseconds(400)); }

  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(TimeSlice, ShortenedBelowAHigherPriorityTenantAndGivenBackAfter) {
  start();
  Child p = probe("lo");
  let_it_look();
  EXPECT_TRUE(tell(p, "sets 0")) << "slices changed with no tenant of higher priority";
  Child h = hold("hi");
  EXPECT_TRUE(tell(p, "expect 300 300")) << "not shortened below the higher-priority tenant";
  EXPECT_EQ(wait_exit(h), 0);
  EXPECT_TRUE(tell(p, "expect 1024 1024")) << "the driver's slice was not given back";
  EXPECT_EQ(wait_exit(p), 0);
}

TEST_F(TimeSlice, TheDriversOwnSliceIsShortenedAgainAndIsWhatComesBack) {
  start();
  Child h = hold("hi");
  Child p = probe("lo");
  EXPECT_TRUE(tell(p, "expect 300 300"));
  // libcuda sets its compute group's slice after creating it (2048 us on an H100).
  EXPECT_TRUE(tell(p, "set 2048"));
  EXPECT_TRUE(tell(p, "expect 300 300")) << "libcuda's own slice was left in place";
  EXPECT_EQ(wait_exit(h), 0);
  EXPECT_TRUE(tell(p, "expect 2048 1024")) << "not the driver's own values that came back";
  EXPECT_EQ(wait_exit(p), 0);
}

// A slice set behind the hook's back (an ioctl that does not pass through it) is found when the
// hook reads the slices back, and shortened again.
TEST_F(TimeSlice, ASliceSetBehindTheHooksBackIsShortenedAgain) {
  start();
  Child h = hold("hi");
  Child p = probe("lo");
  EXPECT_TRUE(tell(p, "expect 300 300"));
  EXPECT_TRUE(tell(p, "rawset 2048"));
  EXPECT_TRUE(tell(p, "expect 300 300")) << "a slice lengthened behind the hook's back was left long";
  EXPECT_EQ(wait_exit(h), 0);
  EXPECT_EQ(wait_exit(p), 0);
}

TEST_F(TimeSlice, AFreedGroupIsForgotten) {
  start();
  Child h = hold("hi");
  Child p = probe("lo");
  EXPECT_TRUE(tell(p, "expect 300 300"));
  EXPECT_TRUE(tell(p, "free"));
  EXPECT_TRUE(tell(p, "sets 2"));
  EXPECT_EQ(wait_exit(h), 0);
  EXPECT_TRUE(tell(p, "expect 0 1024"));
  EXPECT_TRUE(tell(p, "sets 3")) << "a control went to the freed group";
  EXPECT_EQ(wait_exit(p), 0);
}

TEST_F(TimeSlice, TheHighestTenantKeepsTheDriversSlices) {
  start();
  Child l = hold("lo");
  Child p = probe("hi");
  let_it_look();
  EXPECT_TRUE(tell(p, "sets 0"));
  EXPECT_TRUE(tell(p, "expect 1024 1024"));
  EXPECT_EQ(wait_exit(p), 0);
  EXPECT_EQ(wait_exit(l), 0);
}

TEST_F(TimeSlice, OffLeavesTheDriversSlices) {
  start("  lower_priority_timeslice: off\n");
  Child h = hold("hi");
  Child p = probe("lo");
  let_it_look();
  EXPECT_TRUE(tell(p, "sets 0"));
  EXPECT_EQ(wait_exit(p), 0);
  EXPECT_EQ(wait_exit(h), 0);
}

TEST_F(TimeSlice, NotBesideAnotherProcessOfTheTenant) {
  start();
  Child h = hold("hi");
  Child sibling = hold("lo");
  Child p = probe("lo");
  let_it_look();
  EXPECT_TRUE(tell(p, "sets 0")) << "two processes of one tenant would preempt each other";
  EXPECT_EQ(wait_exit(sibling), 0);
  EXPECT_TRUE(tell(p, "expect 300 300")) << "alone in its tenant again, and still the driver's slice";
  EXPECT_EQ(wait_exit(p), 0);
  EXPECT_EQ(wait_exit(h), 0);
}

TEST_F(TimeSlice, ARefusedControlLeavesTheGroupAlone) {
  start();
  Child p = probe("lo");
  EXPECT_TRUE(tell(p, "refuse"));
  Child h = hold("hi");
  let_it_look();
  EXPECT_TRUE(tell(p, "sets 0"));
  EXPECT_TRUE(tell(p, "expect 1024 1024"));
  EXPECT_EQ(wait_exit(h), 0);
  EXPECT_EQ(wait_exit(p), 0) << "the process did not go on normally";
}

}  // namespace
