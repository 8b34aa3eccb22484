// What a tenant keeps free of its quota (shm::TenantGpuUse::kept_free) and the warm-up marks
// its processes leave in their records, as the hook's client reads and writes them: against
// the real daemon, with this process attached to tenant a (2 GiB) as the hook attaches it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "hook/link/client.h"
#include "tests/kit/scoped_scheduler.h"
#include "protocol/clock.h"

namespace cuslice {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kQuota = 2048 * kMiB;

class KeptFree : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CUSLICE_SOCKET", scheduler_.socket().c_str(), 1);
    setenv("CUSLICE_TENANT", "a", 1);
    scheduler_.write_config("tenants:\n  - name: a\n    allow_env: true\n    memory: 2GiB\n");
    ASSERT_TRUE(scheduler_.start());
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (client::attach() != client::AttachStatus::kAttached) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "could not attach: " << client::last_error();
      std::this_thread::sleep_for(10ms);
    }
  }
  void TearDown() override { client::detach(); }

  test_kit::ScopedScheduler scheduler_{"cuslice-kept"};
};

TEST_F(KeptFree, AReservationLeavesTheHeadroomAndTheTenantsKeptFreeFree) {
  EXPECT_EQ(client::tenant_memory_kept(0), 0u);
  EXPECT_EQ(client::memory_try_reserve(0, kQuota - 128 * kMiB + 1, 128 * kMiB), client::Reserve::kOverQuota);
  ASSERT_EQ(client::memory_try_reserve(0, kQuota - 128 * kMiB, 128 * kMiB), client::Reserve::kOk);
  client::memory_release(0, kQuota - 128 * kMiB);

  ASSERT_TRUE(client::tenant_memory_replace_kept(0, 0, 256 * kMiB));
  EXPECT_FALSE(client::tenant_memory_replace_kept(0, 0, 1)) << "the word changed: compute again";
  EXPECT_EQ(client::tenant_memory_kept(0), 256 * kMiB);
  EXPECT_EQ(client::memory_try_reserve(0, kQuota - 384 * kMiB + 1, 128 * kMiB), client::Reserve::kOverQuota);
  ASSERT_EQ(client::memory_try_reserve(0, kQuota - 384 * kMiB, 128 * kMiB), client::Reserve::kOk);
  client::memory_release(0, kQuota - 384 * kMiB);
  // A kept figure beyond the quota refuses everything, and wraps around nothing.
  ASSERT_TRUE(client::tenant_memory_replace_kept(0, 256 * kMiB, ~uint64_t{0}));
  EXPECT_EQ(client::memory_try_reserve(0, 1, 128 * kMiB), client::Reserve::kOverQuota);
  ASSERT_TRUE(client::tenant_memory_replace_kept(0, ~uint64_t{0}, 0));
}

TEST_F(KeptFree, ASixteenthOfTheQuotaCrossedIsReported) {
  bool crossed = true;
  ASSERT_EQ(client::memory_try_reserve(0, 64 * kMiB, 0, &crossed), client::Reserve::kOk);
  EXPECT_FALSE(crossed);
  ASSERT_EQ(client::memory_try_reserve(0, 64 * kMiB, 0, &crossed), client::Reserve::kOk);
  EXPECT_TRUE(crossed) << "128 MiB is the first sixteenth of 2 GiB";
  client::memory_release(0, 128 * kMiB);
}

TEST_F(KeptFree, AWarmUpMarksTheRecordAndAddsItsAllowanceOnce) {
  const int64_t now = now_ns();
  client::TenantProcess procs[8];
  ASSERT_EQ(client::tenant_processes(0, now, procs, 8), 1u);
  EXPECT_TRUE(procs[0].self);
  EXPECT_FALSE(procs[0].young);
  EXPECT_EQ(procs[0].pid, getpid());

  ASSERT_EQ(client::memory_try_reserve(0, 64 * kMiB), client::Reserve::kOk);
  EXPECT_TRUE(client::memory_begin_warmup(0, now, now + 1'000'000'000, 128 * kMiB));
  EXPECT_FALSE(client::memory_begin_warmup(0, now, now + 2'000'000'000, 128 * kMiB)) << "young already";
  EXPECT_EQ(client::tenant_memory_kept(0), 128 * kMiB);
  ASSERT_EQ(client::tenant_processes(0, now, procs, 8), 1u);
  EXPECT_TRUE(procs[0].young);
  EXPECT_EQ(procs[0].charged, 64 * kMiB);
  // Young until the later deadline, on this GPU only.
  EXPECT_TRUE((client::tenant_processes(0, now + 1'500'000'000, procs, 8), procs[0].young));
  EXPECT_FALSE((client::tenant_processes(0, now + 2'000'000'000, procs, 8), procs[0].young));
  EXPECT_FALSE((client::tenant_processes(1, now, procs, 8), procs[0].young));

  EXPECT_TRUE(client::memory_end_warmup(0));
  EXPECT_FALSE(client::memory_end_warmup(0));
  EXPECT_FALSE((client::tenant_processes(0, now, procs, 8), procs[0].young));
  // Once its deadline passed, a new context makes the process young again, allowance and all.
  EXPECT_TRUE(client::memory_begin_warmup(0, now + 3'000'000'000, now + 4'000'000'000, 128 * kMiB));
  EXPECT_EQ(client::tenant_memory_kept(0), 256 * kMiB) << "kept_free drops only at a reconciliation";
  client::memory_release(0, 64 * kMiB);
}

TEST_F(KeptFree, DetachedNothingIsKeptAndNothingMarked) {
  client::detach();
  client::TenantProcess procs[1];
  EXPECT_EQ(client::tenant_memory_kept(0), 0u);
  EXPECT_EQ(client::tenant_processes(0, now_ns(), procs, 1), 0u);
  EXPECT_FALSE(client::memory_begin_warmup(0, 0, 1, 128 * kMiB));
  EXPECT_FALSE(client::memory_end_warmup(0));
  EXPECT_TRUE(client::tenant_memory_replace_kept(0, 5, 6));
}

}  // namespace
}  // namespace cuslice
