// A memory quota written as a percentage of a card is the same number of bytes wherever it
// is resolved:
//   - by the daemon, when the configuration states the card's size (scheduler.gpu_memory);
//   - by the hook's client, from the ppm the segment carries and the card size its process
//     reported (what the hook enforces and shows as the device's total);
//   - by `cuslice status` and the metrics, from the same ppm, through the segment snapshot;
//   - by the hook's local limit (CUSLICE_MEMORY_LIMIT), which resolves a SizeSpec itself.
// Each case runs the real daemon twice (with and without gpu_memory) and attaches this
// process to it with the client library, as the hook does.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "common/segment_snapshot.h"
#include "config/size.h"
#include "hook/link/client.h"
#include "protocol/shm_protocol.h"
#include "tests/kit/scoped_scheduler.h"

namespace cuslice {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Case {
  const char* percent;  // as written in the configuration
  uint64_t numerator;   // the same percentage as an exact fraction of the card
  uint64_t denominator;
  uint64_t card;  // bytes
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.percent << " of " << c.card; }

// What the daemon publishes and the client reports, with the daemon started on `yaml`.
struct Resolved {
  std::optional<uint64_t> configured_bytes;  // the segment's memory_quota, as the daemon wrote it
  std::optional<uint32_t> configured_ppm;    // the segment's memory_quota_ppm
  uint64_t client = 0;                       // client::tenant_memory_quota
  std::optional<uint64_t> status;            // the snapshot's quota on the card
  bool reserve_all = false;                  // reserving exactly the quota succeeds
  bool reserve_one_more = false;             // ... and one byte more does not
};

class QuotaAgreement : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    setenv("CUSLICE_SOCKET", scheduler_.socket().c_str(), 1);
    setenv("CUSLICE_TENANT", "a", 1);
  }

  void TearDown() override { client::detach(); }

  Resolved run_daemon(const std::string& yaml) {
    Resolved r;
    scheduler_.write_config(yaml);
    if (!scheduler_.start()) {
      ADD_FAILURE() << "the scheduler did not start:\n" << scheduler_.log();
      return r;
    }
    // Registration waits in the socket's backlog until the daemon has published its segment.
    const auto deadline = Clock::now() + 5s;
    while (client::attach() != client::AttachStatus::kAttached) {
      if (Clock::now() > deadline || !scheduler_.listening()) {
        ADD_FAILURE() << "could not attach: " << client::last_error();
        return r;
      }
      std::this_thread::sleep_for(10ms);
    }
    const uint64_t card = GetParam().card;
    client::set_device(0, card, nullptr);
    r.client = client::tenant_memory_quota(0);
    r.reserve_all = client::memory_try_reserve(0, r.client) == client::Reserve::kOk;
    r.reserve_one_more = client::memory_try_reserve(0, 1) == client::Reserve::kOk;
    client::memory_release(0, r.client);

    // What `cuslice status` shows: the snapshot of a read-only mapping, once the daemon has
    // published the card's size the hook reported (it copies it a few times a second).
    const int fd = shm_open(scheduler_.shm_name().c_str(), O_RDONLY, 0);
    void* p = fd >= 0 ? mmap(nullptr, sizeof(shm::Segment), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED) {
      ADD_FAILURE() << "cannot map " << scheduler_.shm_name();
      return r;
    }
    SegmentSnapshot s = take_snapshot(*static_cast<const shm::Segment*>(p));
    for (const auto published = Clock::now() + 5s;
         (s.gpus.empty() || s.gpus[0].memory_total != card) && Clock::now() < published;
         s = take_snapshot(*static_cast<const shm::Segment*>(p)))
      std::this_thread::sleep_for(10ms);
    munmap(p, sizeof(shm::Segment));
    if (s.tenants.size() != 1 || s.gpus.empty() || s.gpus[0].memory_total != card) {
      ADD_FAILURE() << "the segment does not show tenant a and the card";
      return r;
    }
    r.configured_bytes = s.tenants[0].memory_quota_bytes;
    r.configured_ppm = s.tenants[0].memory_quota_ppm;
    r.status = s.tenants[0].gpus[0].memory_quota;
    client::detach();
    scheduler_.stop();
    return r;
  }

  test_kit::ScopedScheduler scheduler_{"cuslice-quota"};
};

TEST_P(QuotaAgreement, EveryComponentResolvesThePercentageToTheSameBytes) {
  const Case& c = GetParam();
  const uint64_t want = c.card * c.numerator / c.denominator;  // rounded down
  const std::string tenant = std::string("  - {name: a, allow_env: true, memory: ") + c.percent + "}\n";

  // The daemon knows the card's size: it resolves the percentage and publishes bytes.
  const Resolved known =
      run_daemon("scheduler: {gpu_memory: " + std::to_string(c.card) + "}\ntenants:\n" + tenant);
  ASSERT_TRUE(known.configured_bytes.has_value());
  EXPECT_EQ(*known.configured_bytes, want) << "the daemon";
  EXPECT_EQ(known.client, want) << "the client, given bytes";
  EXPECT_EQ(known.status, want) << "the snapshot, given bytes";

  // It does not: it publishes the fraction, and the hook's client and the snapshot resolve
  // it against the card the hook reported.
  const Resolved fraction = run_daemon("tenants:\n" + tenant);
  ASSERT_TRUE(fraction.configured_ppm.has_value());
  EXPECT_FALSE(fraction.configured_bytes.has_value());
  EXPECT_EQ(fraction.client, want) << "the client, given ppm " << *fraction.configured_ppm;
  EXPECT_EQ(fraction.status, want) << "the snapshot, given ppm " << *fraction.configured_ppm;
  EXPECT_TRUE(fraction.reserve_all);
  EXPECT_FALSE(fraction.reserve_one_more);

  // The hook's local limit (CUSLICE_MEMORY_LIMIT) written the same way.
  SizeSpec local;
  ASSERT_TRUE(parse_size(c.percent, local, nullptr));
  EXPECT_EQ(local.resolve(c.card), want) << "the hook's local limit";
}

INSTANTIATE_TEST_SUITE_P(Cards, QuotaAgreement,
                         ::testing::Values(Case{"33.3%", 333, 1000, 16ull << 30},          // 16 GiB
                                           Case{"33.3%", 333, 1000, 15'000'000'000ull},    // 15 GB
                                           Case{"33.3%", 333, 1000, 12'884'901'887ull},    // odd
                                           Case{"1.13%", 113, 10'000, 24'000'000'000ull}),  // 24 GB
                         [](const auto& info) { return "Case" + std::to_string(info.index); });

}  // namespace
}  // namespace cuslice
