// The memory preemption policy on made-up cards, tenants and times: who is suspended for an
// allocation and in what order, what is never suspended and why, what in-flight operations
// change, and when suspended tenants come back.
#include "scheduler/preemption/memory_preemption.h"

#include <gtest/gtest.h>

namespace cuslice {
namespace {

using namespace std::chrono_literals;
using Kind = Verdict::Kind;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kCard = 80 * kGiB;
constexpr uint64_t kPlenty = 1024 * kGiB;  // host memory that never limits

enum : int { kLow = 0, kNormal = 1, kHigh = 2 };

PreemptProcess process(int32_t pid, uint64_t gib, uint64_t start = 100) {
  PreemptProcess p;
  p.pid = pid;
  p.start_time = start;
  p.gpu_bytes = {gib * kGiB};
  return p;
}

PreemptTenant tenant(const char* name, int priority, bool preemptible, std::vector<PreemptProcess> processes,
                     bool guaranteed = false) {
  PreemptTenant t;
  t.present = true;
  t.name = name;
  t.priority = priority;
  t.preemptible = preemptible;
  t.guaranteed = guaranteed;
  t.processes = std::move(processes);
  return t;
}

// One card whose free memory is what the tenants do not hold (suspended ones hold nothing, or
// what their hooks did not move).
class Card {
 public:
  explicit Card(std::vector<PreemptTenant> tenants, PreemptionParams params = {})
      : policy(params), tenants_(std::move(tenants)) {
    policy.update(tenants_);
  }

  std::vector<GpuMemory> gpus() const {
    uint64_t used = 0;
    for (uint32_t t = 0; t < tenants_.size(); ++t) {
      uint64_t held = 0;
      for (const PreemptProcess& p : tenants_[t].processes) held += p.gpu_bytes.empty() ? 0 : p.gpu_bytes[0];
      used += held - policy.off_card(t, 0, held);  // suspended: none, or what did not move
    }
    return {{kCard, kCard - std::min(used, kCard)}};
  }

  Verdict ask(uint32_t tenant, uint64_t gib, uint64_t host = kPlenty) {
    return policy.request({tenant, 0, gib * kGiB}, gpus(), host, now);
  }

  // Finishes the suspensions a verdict asked for.
  void suspend_all(const Verdict& v) {
    for (uint32_t t : v.suspend) policy.suspended(t, now);
  }

  MemoryPreemption::Resumption step(uint64_t pending_gib = 0) {
    return policy.step(gpus(), {pending_gib * kGiB}, now);
  }

  void set_tenants(std::vector<PreemptTenant> tenants) {
    tenants_ = std::move(tenants);
    policy.update(tenants_);
  }

  MemoryPreemption policy;
  MemoryPreemption::Nanos now{1'000'000'000};

 private:
  std::vector<PreemptTenant> tenants_;
};

TEST(MemoryPreemption, AnAllocationThatFitsSuspendsNobody) {
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 30)})});
  const Verdict v = card.ask(0, 40);
  EXPECT_EQ(v.kind, Kind::kFits);
  EXPECT_TRUE(v.suspend.empty());
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
}

TEST(MemoryPreemption, TheLowestPriorityGivesWayFirst) {
  Card card({tenant("serve", kHigh, false, {}), tenant("normal", kNormal, true, {process(10, 30)}),
             tenant("low", kLow, true, {process(11, 30)})});
  const Verdict v = card.ask(0, 40);  // 20 GiB free: 20 missing
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{2});
  EXPECT_EQ(v.coming_free, 30 * kGiB);
  EXPECT_EQ(v.moving, 30 * kGiB);
  EXPECT_EQ(card.policy.state(2), SuspendState::kSuspending);
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  EXPECT_NE(v.reason.find("low (30.0 GiB)"), std::string::npos) << v.reason;
}

TEST(MemoryPreemption, AmongEqualPrioritiesTheMostRecentlyStartedGivesWayFirst) {
  Card card({tenant("serve", kHigh, false, {}), tenant("old", kLow, true, {process(10, 25, 100), process(12, 5, 900)}),
             tenant("new", kLow, true, {process(11, 30, 500)})});
  const Verdict v = card.ask(0, 40);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{2}) << "`old` started at 100 (its first process), `new` at 500";
}

TEST(MemoryPreemption, EnoughTenantsAreSuspendedAndNoMoreThanNeeded) {
  Card card({tenant("serve", kHigh, false, {}), tenant("a", kLow, true, {process(10, 20)}),
             tenant("b", kLow, true, {process(11, 20, 50)}), tenant("c", kNormal, true, {process(12, 30)})});
  // 10 GiB free; 70 asked: 60 missing, everything goes.
  Verdict v = card.ask(0, 70);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, (std::vector<uint32_t>{1, 2, 3}));
}

TEST(MemoryPreemption, AChosenTenantThatIsNotNeededAfterAllIsSpared) {
  Card card({tenant("serve", kHigh, false, {}), tenant("small", kLow, true, {process(10, 2)}),
             tenant("big", kNormal, true, {process(11, 68)})});
  // 10 GiB free, 35 asked: `small` first (2), then `big` (68); `small` alone never helped.
  const Verdict v = card.ask(0, 35);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{2});
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
}

TEST(MemoryPreemption, OnlyLowerPrioritiesGiveWayToAnUnguaranteedRequest) {
  Card card({tenant("asker", kNormal, true, {process(9, 10)}), tenant("peer", kNormal, true, {process(10, 30)}),
             tenant("above", kHigh, true, {process(11, 30)}), tenant("fixed", kLow, false, {process(12, 5)})});
  const Verdict v = card.ask(0, 20);  // 5 free
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_TRUE(v.suspend.empty());
  EXPECT_NE(v.reason.find("cannot fit"), std::string::npos) << v.reason;
  for (uint32_t t = 1; t < 4; ++t) EXPECT_EQ(card.policy.state(t), SuspendState::kRunning);
}

TEST(MemoryPreemption, AGuaranteedQuotaMakesEveryPreemptibleTenantGiveWay) {
  // A low-priority tenant with an exact quota is owed it, even by a high-priority tenant that
  // accepted being preempted; a non-preemptible one still never gives way.
  Card card({tenant("owed", kLow, false, {process(9, 1)}, /*guaranteed=*/true),
             tenant("fixed", kNormal, false, {process(10, 20)}), tenant("greedy", kHigh, true, {process(11, 55)})});
  const Verdict v = card.ask(0, 20);  // 4 free
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{2});
}

TEST(MemoryPreemption, WithKeepWhatAProcessSaysItCannotMoveSparesItsTenantAndSaysWhy) {
  PreemptionParams keep;
  keep.stop_unsuspendable = false;
  std::vector<PreemptProcess> ipc = {process(10, 30)}, managed = {process(11, 30)}, mps = {process(12, 10)};
  ipc[0].ipc = true;
  managed[0].managed = true;
  mps[0].mps = true;
  Card card({tenant("serve", kHigh, false, {}), tenant("ipc", kLow, true, ipc), tenant("managed", kLow, true, managed),
             tenant("mps", kLow, true, mps)},
            keep);
  Verdict v = card.ask(0, 20);  // 10 free
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("ipc (process 10 says it holds CUDA IPC memory"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("managed (process 11 says it holds managed memory"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("mps (process 12 says it holds an MPS connection"), std::string::npos) << v.reason;

  card.set_tenants({tenant("serve", kHigh, false, {}), tenant("ipc", kLow, true, ipc),
                    tenant("plain", kLow, true, {process(11, 30)}), tenant("mps", kLow, true, mps)});
  v = card.ask(0, 20);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{2});
  EXPECT_TRUE(v.stop.empty());
  EXPECT_NE(v.reason.find("not suspended: ipc"), std::string::npos) << "the log says who was passed over";
}

TEST(MemoryPreemption, WhatAProcessSaysOfItselfNeverSparesItsTenantNorChangesTheOrder) {
  // By default a claim is the tenant's word only: the claiming tenant is taken in its turn (the
  // more recently started first), and its claiming processes are named to be stopped.
  PreemptProcess says = process(11, 20, 300), plain = process(12, 10, 300);
  says.managed = true;
  Card card({tenant("serve", kHigh, false, {}), tenant("honest", kLow, true, {process(10, 30, 100)}),
             tenant("claims", kLow, true, {says, plain})});
  Verdict v = card.ask(0, 30);  // 20 free; `claims` started later: it goes first
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{2});
  EXPECT_EQ(v.stop, std::vector<int32_t>{11});
  EXPECT_EQ(v.moving, 10 * kGiB) << "what is stopped does not move to host memory";
  EXPECT_NE(v.reason.find("stopping what cannot be suspended: process 11 says it holds managed memory"),
            std::string::npos)
      << v.reason;
  EXPECT_EQ(card.policy.claims(2), "process 11 says it holds managed memory, which the driver's checkpoint does not support");
  EXPECT_EQ(card.policy.claims(1), "");

  // Started first, it is spared by the order as any tenant would be: the claim neither helps
  // nor hurts it.
  Card other({tenant("serve", kHigh, false, {}), tenant("honest", kLow, true, {process(10, 30, 400)}),
              tenant("claims", kLow, true, {says, plain})});
  v = other.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{1});
  EXPECT_TRUE(v.stop.empty());
}

TEST(MemoryPreemption, AllOfATenantsClaimsAreCounted) {
  PreemptProcess a = process(11, 10), b = process(12, 10), c = process(13, 10);
  a.ipc = b.mps = c.managed = true;
  Card card({tenant("serve", kHigh, false, {}), tenant("t", kLow, true, {a, b, c})});
  EXPECT_EQ(card.policy.claims(1),
            "process 11 says it holds CUDA IPC memory, which the driver's checkpoint does not support (and 2 more "
            "processes)");
  const Verdict v = card.ask(0, 60);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.stop, (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(v.moving, 0u);
}

TEST(MemoryPreemption, TheHostMustHoldWhatMovesPlusItsReserve) {
  PreemptionParams params;
  params.host_reserve = 4 * kGiB;
  PreemptProcess two_gpus = process(10, 30);
  two_gpus.gpu_bytes.push_back(10 * kGiB);  // its memory on GPU 1 moves too
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {two_gpus})}, params);
  Verdict v = card.ask(0, 70, 43 * kGiB);  // 40 move, 4 stay free: 1 short
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("move 40.0 GiB to host memory"), std::string::npos) << v.reason;
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  v = card.ask(0, 70, 44 * kGiB);
  EXPECT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.moving, 40 * kGiB);
}

TEST(MemoryPreemption, MemoryAlreadyBeingFreedIsWaitedForNotTakenTwice) {
  Card card({tenant("serve", kHigh, false, {}), tenant("serve2", kHigh, false, {}),
             tenant("a", kLow, true, {process(10, 30, 200)}), tenant("b", kLow, true, {process(11, 30, 100)})});
  const Verdict first = card.ask(0, 40);  // 20 free: `a` (the more recent) goes
  ASSERT_EQ(first.kind, Kind::kSuspend) << first.reason;
  EXPECT_EQ(first.suspend, std::vector<uint32_t>{2});
  // A second request before `a` is suspended: 20 free + 30 coming covers 45...
  Verdict second = card.ask(1, 45);
  EXPECT_EQ(second.kind, Kind::kWait) << second.reason;
  EXPECT_EQ(card.policy.state(3), SuspendState::kRunning);
  // ... but not 60: `b` goes too, and `a` is not chosen twice.
  second = card.ask(1, 60);
  ASSERT_EQ(second.kind, Kind::kSuspend) << second.reason;
  EXPECT_EQ(second.suspend, std::vector<uint32_t>{3});
  EXPECT_EQ(second.coming_free, 60 * kGiB);
}

TEST(MemoryPreemption, MemoryBeingFreedForAnotherIsNoRoomForATenantNobodyGivesWayTo) {
  Card card({tenant("serve", kHigh, false, {}), tenant("a", kLow, true, {process(10, 30)}),
             tenant("peer", kLow, true, {process(11, 10)})});
  ASSERT_EQ(card.ask(0, 50).kind, Kind::kSuspend);  // 40 free: `a` goes for the service
  // `peer` is as low as `a`: nobody gives way to it, so the 30 coming are not its to wait for.
  const Verdict v = card.ask(2, 45);
  EXPECT_EQ(v.kind, Kind::kRefused) << v.reason;
  EXPECT_NE(v.reason.find("cannot fit"), std::string::npos) << v.reason;
}

TEST(MemoryPreemption, TheHostReserveCountsSuspensionsInFlight) {
  PreemptionParams params;
  params.host_reserve = 0;
  Card card({tenant("serve", kHigh, false, {}), tenant("a", kLow, true, {process(10, 30, 200)}),
             tenant("b", kLow, true, {process(11, 30, 100)})},
            params);
  ASSERT_EQ(card.ask(0, 40, 50 * kGiB).kind, Kind::kSuspend);
  const Verdict v = card.ask(0, 60, 50 * kGiB);  // 30 already on its way, 30 more would not fit
  EXPECT_EQ(v.kind, Kind::kRefused) << v.reason;
}

TEST(MemoryPreemption, TheRequesterItselfBeingSuspendedIsRefused) {
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 70)})});
  ASSERT_EQ(card.ask(0, 40).kind, Kind::kSuspend);
  const Verdict v = card.ask(1, 5);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("itself is suspending"), std::string::npos) << v.reason;
}

TEST(MemoryPreemption, ARefusedSuspensionIsNotTriedAgainUntilItsProcessesAreGone) {
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 70)})});
  ASSERT_EQ(card.ask(0, 40).kind, Kind::kSuspend);
  card.policy.suspend_refused(1, "checkpoint of process 10 failed: operation not supported");
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  EXPECT_EQ(card.policy.reason(1), "checkpoint of process 10 failed: operation not supported");
  Verdict v = card.ask(0, 40);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("train (checkpoint of process 10 failed"), std::string::npos) << v.reason;
  card.set_tenants({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(11, 70)})});
  EXPECT_EQ(card.policy.reason(1), "") << "a new process: the refusal no longer holds";
  v = card.ask(0, 40);
  EXPECT_EQ(v.kind, Kind::kSuspend) << v.reason;
}

TEST(MemoryPreemption, AFailedTenantIsLeftAloneAndSaysWhy) {
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 70)})});
  ASSERT_EQ(card.ask(0, 40).kind, Kind::kSuspend);
  card.policy.failed(1, "restore of process 10 failed: out of memory; the process must be restarted");
  EXPECT_EQ(card.policy.state(1), SuspendState::kFailed);
  const Verdict v = card.ask(0, 40);
  EXPECT_EQ(v.kind, Kind::kRefused);
  EXPECT_NE(v.reason.find("must be restarted"), std::string::npos) << v.reason;
  EXPECT_TRUE(card.step().resume.empty()) << "never resumed by the policy";
}

TEST(MemoryPreemption, ATenantBeingResumedIsWaitedFor) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 0;
  Card card({tenant("serve", kHigh, false, {process(9, 10)}), tenant("train", kLow, true, {process(10, 60)})}, params);
  ASSERT_EQ(card.ask(0, 30).kind, Kind::kSuspend);  // 10 free
  card.policy.suspended(1, card.now);
  ASSERT_EQ(card.step().resume, std::vector<uint32_t>{1}) << "70 free: it fits again";
  EXPECT_EQ(card.policy.state(1), SuspendState::kResuming);
  const Verdict v = card.ask(0, 30);  // 10 free while its memory comes back
  EXPECT_EQ(v.kind, Kind::kWait) << v.reason;
  card.policy.resumed(1, card.now);
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  EXPECT_EQ(card.ask(0, 30).kind, Kind::kSuspend) << "once it runs, it may be suspended again";
}

TEST(MemoryPreemption, ASuspendedTenantResumesOnceItsMemoryHasFitForTheHoldOff) {
  PreemptionParams params;
  params.resume_holdoff = 2s;
  params.resume_margin = kGiB;
  Card card({tenant("serve", kHigh, false, {process(9, 40)}), tenant("train", kLow, true, {process(10, 35)})}, params);
  // 5 free; the service asks for 20 more.
  ASSERT_EQ(card.ask(0, 20).kind, Kind::kSuspend);
  card.policy.suspended(1, card.now);
  EXPECT_EQ(card.policy.state(1), SuspendState::kSuspended);
  // 40 free now, but the service's waiting allocation takes 20 of it first.
  MemoryPreemption::Resumption r = card.step(/*pending_gib=*/20);
  EXPECT_TRUE(r.resume.empty());
  // Looked at again a hold-off later: room may come without an event (a process without the
  // hook ends).
  EXPECT_EQ(r.wake_at, card.now + 2s);
  // Nothing waiting: 40 free, 35 + 1 needed; not before the hold-off.
  r = card.step();
  EXPECT_TRUE(r.resume.empty());
  EXPECT_EQ(r.wake_at, card.now + 2s);
  card.now += 1s;
  r = card.step(/*pending_gib=*/10);  // a break: the hold-off starts again
  EXPECT_TRUE(r.resume.empty());
  r = card.step();
  EXPECT_EQ(r.wake_at, card.now + 2s);
  card.now += 2s;
  r = card.step();
  EXPECT_EQ(r.resume, std::vector<uint32_t>{1});
  EXPECT_EQ(card.policy.state(1), SuspendState::kResuming);
}

TEST(MemoryPreemption, TheMarginKeepsAResumeFromFillingTheCard) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 2 * kGiB;
  Card card({tenant("serve", kHigh, false, {process(9, 44)}), tenant("train", kLow, true, {process(10, 35)})}, params);
  ASSERT_EQ(card.ask(0, 10).kind, Kind::kSuspend);
  card.policy.suspended(1, card.now);
  EXPECT_TRUE(card.step().resume.empty()) << "36 free: 35 fits, 35 + 2 does not";
}

TEST(MemoryPreemption, ResumesGoByPriorityThenByTimeSuspendedAndShareTheRoom) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 0;
  Card card({tenant("serve", kHigh, false, {process(9, 70)}), tenant("first", kLow, true, {process(10, 3, 100)}),
             tenant("second", kLow, true, {process(11, 3, 50)}), tenant("normal", kNormal, true, {process(12, 3)})},
            params);
  // The service asks for 10 more with 1 free: all three go (9 of 9 missing).
  const Verdict v = card.ask(0, 10);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  ASSERT_EQ(v.suspend.size(), 3u);
  card.policy.suspended(1, card.now);
  card.policy.suspended(2, card.now + 1s);
  card.policy.suspended(3, card.now + 2s);
  card.now += 3s;
  // 10 free: room for all three; with 4 waiting, room for two: `normal`, then `first`.
  MemoryPreemption::Resumption r = card.step(/*pending_gib=*/4);
  EXPECT_EQ(r.resume, (std::vector<uint32_t>{3, 1}));
}

TEST(MemoryPreemption, AResumeNeedsRoomOnEveryGpuTheTenantHeld) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 0;
  PreemptProcess p = process(10, 30);
  p.gpu_bytes.push_back(30 * kGiB);
  MemoryPreemption policy(params);
  policy.update({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {p})});
  const MemoryPreemption::Nanos now{0};
  ASSERT_EQ(policy.request({0, 0, 60 * kGiB}, {{kCard, 50 * kGiB}, {kCard, 50 * kGiB}}, kPlenty, now).kind,
            Kind::kSuspend);
  policy.suspended(1, now);
  EXPECT_TRUE(policy.step({{kCard, 80 * kGiB}, {kCard, 20 * kGiB}}, {}, now).resume.empty());
  EXPECT_EQ(policy.step({{kCard, 80 * kGiB}, {kCard, 30 * kGiB}}, {}, now).resume, std::vector<uint32_t>{1});
  EXPECT_EQ(policy.bytes(1), (std::vector<uint64_t>{30 * kGiB, 30 * kGiB}));
}

TEST(MemoryPreemption, ASuspendedTenantWhoseProcessesAllExitedIsForgotten) {
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 70)})});
  ASSERT_EQ(card.ask(0, 40).kind, Kind::kSuspend);
  card.policy.suspended(1, card.now);
  card.set_tenants({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {})});
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  EXPECT_TRUE(card.step().resume.empty());
}

TEST(MemoryPreemption, OutcomesOfOperationsNotAskedForAreIgnored) {
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 70)})});
  card.policy.suspended(1, card.now);
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  card.policy.resumed(1, card.now);
  card.policy.resume_deferred(1, "x");
  EXPECT_EQ(card.policy.state(1), SuspendState::kRunning);
  card.policy.suspended(7, card.now);  // no such tenant
  EXPECT_EQ(card.policy.state(7), SuspendState::kRunning);
  EXPECT_EQ(card.policy.request({9, 0, kGiB}, card.gpus(), kPlenty, card.now).kind, Kind::kRefused);
}

TEST(MemoryPreemption, ADeferredResumeStaysSuspendedAndIsTriedAgain) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 0;
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 70)})}, params);
  ASSERT_EQ(card.ask(0, 40).kind, Kind::kSuspend);
  card.policy.suspended(1, card.now);
  ASSERT_EQ(card.step().resume, std::vector<uint32_t>{1});
  card.policy.resume_deferred(1, "restore of process 10 failed: busy");
  EXPECT_EQ(card.policy.state(1), SuspendState::kSuspended);
  EXPECT_EQ(card.step().resume, std::vector<uint32_t>{1});
}

TEST(MemoryPreemption, AHeldTenantIsNotResumedUntilLetGo) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 0;
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 30)})}, params);
  ASSERT_EQ(card.ask(0, 60).kind, Kind::kSuspend);
  card.policy.suspended(1, card.now);
  card.policy.hold(1, true);  // a process that joined it is being suspended too
  EXPECT_TRUE(card.step().resume.empty());
  card.policy.hold(1, false);
  EXPECT_EQ(card.step().resume, std::vector<uint32_t>{1});
}

TEST(MemoryPreemption, ATenantFoundSuspendedIsResumedLikeAnyOther) {
  PreemptionParams params;
  params.resume_holdoff = 0s;
  params.resume_margin = 0;
  Card card({tenant("serve", kHigh, false, {}), tenant("train", kLow, true, {process(10, 30)})}, params);
  card.policy.adopt_suspended(1, card.now, "found suspended at start");
  EXPECT_EQ(card.policy.state(1), SuspendState::kSuspended);
  EXPECT_EQ(card.policy.reason(1), "found suspended at start");
  EXPECT_EQ(card.step().resume, std::vector<uint32_t>{1});
}

TEST(MemoryPreemption, SizesAreWrittenForPeople) {
  EXPECT_EQ(describe_bytes(0), "0 B");
  EXPECT_EQ(describe_bytes(512ull << 20), "512 MiB");
  EXPECT_EQ(describe_bytes(3 * kGiB + kGiB / 5), "3.2 GiB");
  EXPECT_EQ(describe_bytes(2048 * kGiB), "2.0 TiB");
}

// --- The fast way (rule 6) ------------------------------------------------------------------

PreemptProcess movable(int32_t pid, uint64_t gib, uint64_t pool_gib = 0) {
  PreemptProcess p = process(pid, gib);
  p.movable = true;
  p.movable_bytes = gib * kGiB;
  p.pool_bytes = pool_gib * kGiB;
  return p;
}

std::vector<PreemptTenant> service_and_trainer(PreemptProcess trainer) {
  return {tenant("serve", kHigh, false, {process(1, 0)}, true), tenant("train", kLow, true, {std::move(trainer)})};
}

TEST(FastWay, MovesOnlyWhatIsMissingWithALittleSlack) {
  Card card(service_and_trainer(movable(2, 70)));
  // 10 GiB free: 20 GiB of the trainer's 70 must move for 30, and the room margin (1 GiB).
  const Verdict v = card.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  ASSERT_EQ(v.suspend, std::vector<uint32_t>{1});
  ASSERT_EQ(v.move.size(), 1u);
  EXPECT_GE(v.move[0], 21 * kGiB);
  EXPECT_LE(v.move[0], 21 * kGiB + 21 * kGiB / 50);
  EXPECT_TRUE(card.policy.fast(1));
  card.policy.moved(1, v.move[0]);
  card.policy.suspended(1, card.now);
  EXPECT_EQ(card.ask(0, 30).kind, Kind::kFits);
  // The rest stays on the card.
  EXPECT_EQ(card.policy.off_card(1, 0, 70 * kGiB), v.move[0]);
}

TEST(FastWay, TheRoomMadeKeepsTheMarginForWhatTheRequesterDoesNext) {
  PreemptionParams params;
  params.room_margin = 2 * kGiB;
  Card card(service_and_trainer(movable(2, 70)), params);
  // 10 GiB free, 30 asked: 20 missing, and 2 more for the service's first kernels.
  const Verdict v = card.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  ASSERT_EQ(v.move.size(), 1u);
  EXPECT_GE(v.move[0], 22 * kGiB);
  EXPECT_LE(v.move[0], 22 * kGiB + 22 * kGiB / 50);
}

TEST(FastWay, AMarginTheTenantCannotMoveDoesNotRefuseTheRequest) {
  PreemptionParams params;
  params.room_margin = 4 * kGiB;
  // The service holds 60 GiB, the trainer 19: 1 free; 19 asked, 18 missing, 22 with the margin.
  Card card({tenant("serve", kHigh, false, {process(1, 60)}, true), tenant("train", kLow, true, {movable(2, 19)})},
            params);
  const Verdict v = card.ask(0, 19);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.move, std::vector<uint64_t>{19 * kGiB}) << "all it can move, the fast way";
  EXPECT_TRUE(card.policy.fast(1));
}

TEST(MemoryPreemption, TheMarginTakesATenantMoreOnlyWhereTheFirstLeavesItShort) {
  PreemptionParams params;
  params.room_margin = kGiB;
  const auto two = [&] {
    return std::vector<PreemptTenant>{tenant("serve", kHigh, false, {}), tenant("a", kLow, true, {process(10, 35)}),
                                      tenant("b", kLow, true, {process(11, 35, 50)})};
  };
  // 10 GiB free. 40 asked: `a` (35, started last) covers 30 missing and the margin.
  Card roomy(two(), params);
  Verdict v = roomy.ask(0, 40);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, std::vector<uint32_t>{1});
  // 45 asked: 35 missing, which `a` covers exactly; the margin takes `b` too.
  Card tight(two(), params);
  v = tight.ask(0, 45);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.suspend, (std::vector<uint32_t>{1, 2}));
}

TEST(FastWay, NeedsEveryProcessOfTheTenantToMove) {
  Card card(service_and_trainer(movable(2, 35)));
  std::vector<PreemptTenant> tenants = service_and_trainer(movable(2, 35));
  tenants[1].processes.push_back(process(3, 35));  // an older hook, or one told not to
  card.set_tenants(tenants);
  const Verdict v = card.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.move, std::vector<uint64_t>{0}) << "the checkpoint, for all";
  EXPECT_FALSE(card.policy.fast(1));
}

TEST(FastWay, IsOffWhenTheConfigurationSaysSo) {
  PreemptionParams params;
  params.fast = false;
  Card card(service_and_trainer(movable(2, 70)), params);
  const Verdict v = card.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.move, std::vector<uint64_t>{0});
}

TEST(FastWay, AHostPoolCoversWhatMovesAndTheHostTheRest) {
  // Only the part moves, so the host needs room for that much, less what is pinned already.
  Card card(service_and_trainer(movable(2, 70, 16)));
  EXPECT_EQ(card.ask(0, 30, 4 * kGiB + 8 * kGiB).kind, Kind::kSuspend) << "20 GiB: 16 pinned, 4 more plus 4 reserve";
  Card small(service_and_trainer(movable(2, 70)));
  const Verdict refused = small.ask(0, 30, 12 * kGiB);
  EXPECT_EQ(refused.kind, Kind::kRefused);
  EXPECT_NE(refused.reason.find("to host memory"), std::string::npos) << refused.reason;
}

TEST(FastWay, ATenantThatStaysShortIsMovedOnceMoreThenCheckpointed) {
  Card card(service_and_trainer(movable(2, 70)));
  Verdict v = card.ask(0, 30);
  ASSERT_GT(v.move.at(0), 0u);
  // Its hooks say they moved nothing after all (or moved less than they say): the card is
  // still short, and the trainer is asked once more the fast way ...
  card.policy.moved(1, 0);
  card.policy.suspended(1, card.now);
  v = card.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  ASSERT_EQ(v.suspend, std::vector<uint32_t>{1});
  EXPECT_GT(v.move.at(0), 0u);
  card.policy.moved(1, 0);
  card.policy.suspended(1, card.now);
  // ... then the checkpoint takes everything.
  v = card.ask(0, 30);
  ASSERT_EQ(v.kind, Kind::kSuspend) << v.reason;
  EXPECT_EQ(v.move, std::vector<uint64_t>{0});
  EXPECT_EQ(card.policy.state(1), SuspendState::kSuspending);
  card.policy.suspended(1, card.now);
  EXPECT_FALSE(card.policy.fast(1));
  EXPECT_EQ(card.policy.off_card(1, 0, 70 * kGiB), 70 * kGiB);
  EXPECT_EQ(card.ask(0, 30).kind, Kind::kFits);
}

TEST(FastWay, ARefusedCheckpointOfTheRestKeepsWhatMoved) {
  Card card(service_and_trainer(movable(2, 70)));
  Verdict v = card.ask(0, 30);
  card.policy.moved(1, v.move.at(0));
  card.policy.suspended(1, card.now);
  card.policy.escalate(1);  // the hooks failed the next time: the checkpoint takes the rest
  card.policy.suspend_refused(1, "the driver refused");
  EXPECT_EQ(card.policy.state(1), SuspendState::kSuspended);
  EXPECT_TRUE(card.policy.fast(1));
  EXPECT_EQ(card.policy.off_card(1, 0, 70 * kGiB), v.move[0]);
  // And it is not tried again: a request that needs more is refused.
  EXPECT_EQ(card.ask(0, 60).kind, Kind::kRefused);
}

TEST(FastWay, ResumesOnceWhatMovedFitsAgain) {
  Card card(service_and_trainer(movable(2, 70)));
  const Verdict v = card.ask(0, 30);
  card.policy.moved(1, v.move.at(0));
  card.policy.suspended(1, card.now);
  // The service holds 30 of the 30.2 free: no room for the 20.2 that moved.
  std::vector<PreemptTenant> busy = service_and_trainer(movable(2, 70));
  busy[0].processes[0].gpu_bytes = {30 * kGiB};
  card.set_tenants(busy);
  EXPECT_TRUE(card.step().resume.empty());
  // It left: 30.2 free, and the 20.2 (plus the margin) fit.
  card.set_tenants(service_and_trainer(movable(2, 70)));
  EXPECT_TRUE(card.step().resume.empty()) << "the holdoff first";
  card.now += std::chrono::seconds(2);
  EXPECT_EQ(card.step().resume, std::vector<uint32_t>{1});
}

}  // namespace
}  // namespace cuslice
