// The RM control underneath every process list (nvidia-smi's included): the hook's ioctl
// drops the processes this one may not see from NV2080_CTRL_CMD_GPU_GET_PIDS answers and
// leaves every other ioctl alone. The kernel is played by the fake resource manager
// (tests/fake_driver/fake_rm_control.h), preloaded after the hook.
//
//   ProcessList.*         one process under a local quota (it may see itself only)
//   ProcessListTenant.*   the real scheduler, tenants a and b; the probes (ProcessListChild.*,
//                         this same binary) are NVML-only processes like nvidia-smi: they never
//                         call cuInit, the RM control is their first contact with the hook
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "hook/base/nvidia_rm_abi.h"
#include "tests/fake_driver/fake_rm_control.h"
#include "tests/hook/child_process.h"
#include "tests/hook/hook_test_support.h"

using namespace hook_test;
namespace rm = cuslice::rm;

namespace {

constexpr unsigned long kRmControl = _IOWR(rm::kIoctlMagic, rm::kEscRmControl, rm::ControlParams);
constexpr unsigned long kXfer = _IOWR(rm::kIoctlMagic, rm::kEscIoctlXferCmd, rm::IoctlXfer);
static_assert(kRmControl == 0xc020462aul);

constexpr uint32_t kErrGeneric = 0x1f;  // an RM status other than NV_OK (NV_ERR_GENERIC)

uint32_t self() { return static_cast<uint32_t>(getpid()); }

// The fake resource manager's answer to the next RM controls.
void answer(const std::vector<uint32_t>& pids, uint32_t rm_status = rm::kOk, int result = 0, int error = 0) {
  auto set = reinterpret_cast<fake_rm_set_answer_fn>(dlsym(RTLD_DEFAULT, "fake_rm_set_answer"));
  ASSERT_NE(set, nullptr) << "libfake_nvidia_rm.so is not preloaded after libcuslice.so";
  set(pids.data(), static_cast<uint32_t>(pids.size()), rm_status, result, error);
}

unsigned long rm_requests() {
  auto get = reinterpret_cast<fake_rm_requests_fn>(dlsym(RTLD_DEFAULT, "fake_rm_requests"));
  return get ? get() : 0;
}

// One RM control as NVML issues it, on a stand-in for /dev/nvidiactl.
struct Control {
  explicit Control(uint32_t cmd = rm::kCmdGpuGetPids) : params(std::make_unique<rm::GetPidsParams>()) {
    block.cmd = cmd;
    block.params = reinterpret_cast<uintptr_t>(params.get());
    block.paramsSize = sizeof(rm::GetPidsParams);
    block.status = 0xffffffff;  // RM writes it
  }
  // ioctl's return value; errno in `error`.
  int issue(bool xfer = false) {
    const int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    rm::IoctlXfer wrapper{rm::kEscRmControl, sizeof block, reinterpret_cast<uintptr_t>(&block)};
    errno = 0;
    const int r = xfer ? ioctl(fd, kXfer, &wrapper) : ioctl(fd, kRmControl, &block);
    error = errno;
    close(fd);
    return r;
  }
  std::vector<uint32_t> pids() const {
    return {params->pidTbl, params->pidTbl + std::min(params->pidTblCount, rm::kGetPidsMaxCount)};
  }

  rm::ControlParams block{};
  std::unique_ptr<rm::GetPidsParams> params;
  int error = 0;
};

// "self,123,456" -> {getpid(), 123, 456}
std::vector<uint32_t> pid_list(const char* text) {
  std::vector<uint32_t> out;
  std::stringstream in(text ? text : "");
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item == "self" ? self() : static_cast<uint32_t>(std::stoul(item)));
  return out;
}

// ---- one process under a local quota ---------------------------------------------------

TEST(ProcessList, GetPidsShowsOnlyThisProcessUnderALocalQuota) {
  answer({4242, self(), 4343, 4444});
  Control c;
  const unsigned long before = rm_requests();
  ASSERT_EQ(c.issue(), 0);
  EXPECT_EQ(rm_requests(), before + 1) << "the hook did not forward the ioctl to the next one";
  EXPECT_EQ(c.block.status, rm::kOk);
  EXPECT_EQ(c.pids(), std::vector<uint32_t>{self()});
  // The dropped entries do not linger behind the count.
  for (uint32_t i = 1; i < 4; ++i) EXPECT_EQ(c.params->pidTbl[i], 0u) << i;
}

TEST(ProcessList, ControlWrappedInTheXferEscapeIsFilteredToo) {
  answer({4242, 4343, self()});
  Control c;
  ASSERT_EQ(c.issue(/*xfer=*/true), 0);
  EXPECT_EQ(c.pids(), std::vector<uint32_t>{self()});
}

TEST(ProcessList, OtherControlsAreUntouched) {
  const std::vector<uint32_t> all = {4242, self(), 4343};
  answer(all);
  for (uint32_t cmd : {rm::kCmdGpuGetPidInfo, 0x20800101u, 0x0000018du}) {
    Control c(cmd);
    ASSERT_EQ(c.issue(), 0);
    EXPECT_EQ(c.pids(), all) << std::hex << cmd;
  }
}

TEST(ProcessList, FailedControlsAreUntouched) {
  const std::vector<uint32_t> all = {4242, self(), 4343};
  // The ioctl itself fails: its result and errno come back as the next ioctl gave them.
  answer(all, rm::kOk, -1, EIO);
  Control failed;
  EXPECT_EQ(failed.issue(), -1);
  EXPECT_EQ(failed.error, EIO);
  EXPECT_EQ(failed.pids(), all);
  // RM refused the control (status in the block).
  answer(all, kErrGeneric);
  Control refused;
  EXPECT_EQ(refused.issue(), 0);
  EXPECT_EQ(refused.block.status, kErrGeneric);
  EXPECT_EQ(refused.pids(), all);
}

TEST(ProcessList, ShortMissingOrSerializedParamsAreLeftAlone) {
  const std::vector<uint32_t> all = {4242, self(), 4343};
  answer(all);
  // A block smaller than NVIDIA's struct is not one the hook knows.
  Control shorter;
  shorter.block.paramsSize = sizeof(rm::GetPidsParams) - sizeof(uint32_t);
  ASSERT_EQ(shorter.issue(), 0);
  EXPECT_EQ(shorter.pids(), all);
  Control tiny;
  tiny.block.paramsSize = sizeof(uint32_t);
  EXPECT_EQ(tiny.issue(), 0);
  // No parameter block at all: nothing to read, nothing to crash on.
  Control none;
  none.block.params = 0;
  EXPECT_EQ(none.issue(), 0);
  EXPECT_EQ(none.issue(/*xfer=*/true), 0);
  // A FINN-serialized block has another layout.
  Control serialized;
  serialized.block.flags = rm::kFlagFinnSerialized;
  ASSERT_EQ(serialized.issue(), 0);
  EXPECT_EQ(serialized.pids(), all);
}

TEST(ProcessList, OtherIoctlsPassThrough) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "hello", 5), 5);
  int queued = -1;
  EXPECT_EQ(ioctl(p[0], FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 5);
  close(p[0]);
  close(p[1]);
  errno = 0;
  EXPECT_EQ(ioctl(-1, FIONREAD, &queued), -1);
  EXPECT_EQ(errno, EBADF);
  // An RM control request on a null argument: forwarded as it is, nothing read.
  errno = 0;
  EXPECT_EQ(ioctl(-1, kRmControl, nullptr), -1);
  EXPECT_EQ(errno, EBADF);
}

// ---- children of ProcessListTenant -----------------------------------------------------

// Holds a CUDA context in its tenant (registered at cuInit) until stdin closes.
class ProcessListChild : public CudaTest {};

TEST_F(ProcessListChild, Hold) {
  if (!std::getenv("TEST_HOLD")) GTEST_SKIP() << "run by ProcessListTenant.*";
  std::printf("ready\n");
  std::fflush(stdout);
  wait_for_stdin_to_close();
}

// An NVML-only process, as nvidia-smi: no cuInit, straight to the RM control. The kernel
// answers TEST_ANSWER; the process must be shown TEST_EXPECT, in that order.
TEST(ProcessListProbe, ReadsThePidsOfTheGpu) {
  if (!std::getenv("TEST_ANSWER")) GTEST_SKIP() << "run by ProcessListTenant.*";
  answer(pid_list(std::getenv("TEST_ANSWER")));
  if (std::getenv("TEST_CUINIT")) {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
  Control c;
  ASSERT_EQ(c.issue(), 0);
  EXPECT_EQ(c.pids(), pid_list(std::getenv("TEST_EXPECT")));
  // The same through the XFER wrapper, and again (the hook is initialised by now).
  Control again;
  ASSERT_EQ(again.issue(/*xfer=*/true), 0);
  EXPECT_EQ(again.pids(), pid_list(std::getenv("TEST_EXPECT")));
}

// ---- the scheduler and its tenants -----------------------------------------------------

class ProcessListTenant : public ::testing::Test {
 protected:
  void SetUp() override {
    scheduler_ = std::make_unique<Scheduler>(
        "scheduler:\n  quantum: 20ms\n  gpu_memory: 16GiB\n"
        "tenants:\n"
        "  - name: a\n    allow_env: true\n    memory: 4GiB\n    compute: {share: 50%}\n"
        "  - name: b\n    allow_env: true\n    memory: 4GiB\n    compute: {share: 50%}\n");
    ASSERT_TRUE(scheduler_->running()) << "the scheduler did not start";
  }
  void TearDown() override { scheduler_.reset(); }

  // This binary as `test`, in `tenant` ("" = none asked for) of this test's scheduler.
  Child child(const char* test, const std::string& tenant, std::vector<std::string> env) {
    const bool own_socket = std::any_of(env.begin(), env.end(), [](const std::string& e) {
      return e.rfind("CUSLICE_SOCKET=", 0) == 0;
    });
    if (!own_socket) env.push_back("CUSLICE_SOCKET=" + scheduler_->socket());
    if (!tenant.empty()) env.push_back("CUSLICE_TENANT=" + tenant);
    return spawn({"/proc/self/exe", std::string("--gtest_filter=") + test}, env, /*preload=*/true,
                 {"CUSLICE_TENANT", "CUSLICE_MEMORY_LIMIT"});
  }
  int probe(const std::string& tenant, const std::string& answer, const std::string& expect,
            std::vector<std::string> env = {}) {
    env.push_back("TEST_ANSWER=" + answer);
    env.push_back("TEST_EXPECT=" + expect);
    Child c = child("ProcessListProbe.*", tenant, env);
    return wait_exit(c);
  }
  static std::string n(pid_t pid) { return std::to_string(pid); }

  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(ProcessListTenant, EachTenantIsShownItsOwnProcessesOnly) {
  Child a = child("ProcessListChild.Hold", "a", {"TEST_HOLD=1"});
  Child b = child("ProcessListChild.Hold", "b", {"TEST_HOLD=1"});
  ASSERT_TRUE(read_line(a.out, "ready"));
  ASSERT_TRUE(read_line(b.out, "ready"));
  const std::string gpu = "self," + n(a.pid) + "," + n(b.pid) + ",4242";
  EXPECT_EQ(probe("a", gpu, "self," + n(a.pid)), 0) << "tenant a was shown another tenant's processes";
  EXPECT_EQ(probe("b", gpu, "self," + n(b.pid)), 0) << "tenant b was shown another tenant's processes";
  EXPECT_EQ(probe("b", gpu, "self," + n(b.pid), {"TEST_CUINIT=1"}), 0) << "after cuInit";
  EXPECT_EQ(wait_exit(a), 0);
  EXPECT_EQ(wait_exit(b), 0);
}

TEST_F(ProcessListTenant, WithoutATenantNothingIsFiltered) {
  Child a = child("ProcessListChild.Hold", "a", {"TEST_HOLD=1"});
  ASSERT_TRUE(read_line(a.out, "ready"));
  // No scheduler reachable, no tenant asked for, no quota: the hook changes nothing.
  const std::string gpu = "self," + n(a.pid) + ",4242";
  EXPECT_EQ(probe("", gpu, gpu, {"CUSLICE_SOCKET=/nonexistent/cuslice.sock"}), 0);
  EXPECT_EQ(wait_exit(a), 0);
}

TEST_F(ProcessListTenant, AProcessTheSchedulerRefusesIsShownItselfOnly) {
  Child a = child("ProcessListChild.Hold", "a", {"TEST_HOLD=1"});
  ASSERT_TRUE(read_line(a.out, "ready"));
  EXPECT_EQ(probe("nobody", "self," + n(a.pid) + ",4242", "self"), 0);
  EXPECT_EQ(wait_exit(a), 0);
}

}  // namespace
