// The policy on a simulated clock: every tenant with demand would run flat out; the holder
// is charged exactly the time it holds the token, and the policy is consulted at least every
// millisecond (a kernel boundary; `step_at_most`) or when it asks.
#include "scheduler/scheduling/token_policy.h"

#include <gtest/gtest.h>

#include <numeric>

namespace cuslice {
namespace {

using namespace std::chrono_literals;
using Nanos = TokenPolicy::Nanos;

TenantParams tenant(double share, int priority = 1, double limit = 1.0) {
  return {true, priority, share, limit};
}

class Sim {
 public:
  Sim(std::vector<TenantParams> tenants, PolicyParams params = {})
      : policy(params, tenants), activity(tenants.size(), {true, false}), used(tenants.size()) {}

  // Runs for `duration`; returns the holder seen at each step, in order.
  void run(Nanos duration) {
    const Nanos end = now + duration;
    while (now < end) {
      const TokenPolicy::Decision d = policy.step(now, activity);
      if (last != kNoHolder && d.holder != last && queue > Nanos{0}) {
        draining = last;  // its queued work runs on after it lost the token
        drain_left = queue;
        activity[last].queued = true;
      }
      last = d.holder;
      Nanos next = std::min({d.wake_at, end, now + step_at_most});
      uint32_t runs = d.holder;
      if (draining != kNoHolder) {
        next = std::min(next, now + drain_left);
        runs = draining;
        drain_left -= next - now;
        if (drain_left <= Nanos{0}) {
          activity[draining].queued = false;
          draining = kNoHolder;
        }
      }
      if (runs != kNoHolder) {
        used[runs] += next - now;
        if (runs >= silent.size() || !silent[runs]) policy.charge(runs, next - now, next);
      }
      now = next;
    }
  }

  double fraction(size_t t) const {
    const Nanos total = std::accumulate(used.begin(), used.end(), Nanos{0});
    return static_cast<double>(used[t].count()) / static_cast<double>(total.count());
  }

  TokenPolicy policy;
  std::vector<TenantActivity> activity;
  std::vector<Nanos> used;
  Nanos now{0};
  // The daemon steps when the policy asks or something happens; the hooks' GPU time is read
  // (charged) only then.
  Nanos step_at_most = 1ms;
  // How long a holder's queued work runs after it loses the token.
  Nanos queue{0};
  // Tenants whose hooks report no GPU time at all (a lie the policy must not reward).
  std::vector<bool> silent;

 private:
  uint32_t last = kNoHolder;
  uint32_t draining = kNoHolder;
  Nanos drain_left{0};
};

TEST(TokenPolicy, SeventyThirty) {
  Sim sim({tenant(0.7), tenant(0.3)});
  sim.run(20s);
  EXPECT_NEAR(sim.fraction(0), 0.70, 0.01);
  EXPECT_NEAR(sim.fraction(1), 0.30, 0.01);
}

// A tenant that synchronises after every step: its demand drops for 0.3 ms every 2 ms. What
// it gives up early must not cost it its share.
TEST(TokenPolicy, SharesHoldForTenantsThatPauseBetweenSteps) {
  Sim sim({tenant(0.7), tenant(0.3)});
  const Nanos end = 20s;
  while (sim.now < end) {
    const bool pausing = (sim.now.count() % 2'000'000) >= 1'700'000;
    sim.activity[0].demand = !pausing;
    const TokenPolicy::Decision d = sim.policy.step(sim.now, sim.activity);
    const Nanos next = std::min({d.wake_at, sim.now + 100us});
    if (d.holder != kNoHolder && sim.activity[d.holder].demand) {
      sim.used[d.holder] += next - sim.now;
      sim.policy.charge(d.holder, next - sim.now, next);
    }
    sim.now = next;
  }
  // Tenant 0 can use at most 85% of the time (it pauses 15%): 70% is within reach.
  EXPECT_NEAR(sim.fraction(0), 0.70, 0.01);
  EXPECT_NEAR(sim.fraction(1), 0.30, 0.01);
}

// A tenant's GPU time comes from its own hooks: one that reports nothing is charged the time
// it holds the token with work, and gets its share, not the whole GPU.
TEST(TokenPolicy, ATenantThatReportsNoGpuTimeGetsItsShareOnly) {
  Sim sim({tenant(0.5), tenant(0.5)});
  sim.silent = {false, true};
  sim.run(10s);
  EXPECT_NEAR(sim.fraction(0), 0.50, 0.01);
  EXPECT_NEAR(sim.fraction(1), 0.50, 0.01);
}

TEST(TokenPolicy, ATenantThatReportsNoGpuTimeIsStillCappedByItsLimit) {
  PolicyParams p;
  p.limit_window = 1s;
  Sim sim({tenant(1.0, 1, 0.3)}, p);
  sim.silent = {true};
  sim.run(10s);
  const double busy = static_cast<double>(sim.used[0].count()) / static_cast<double>(Nanos(10s).count());
  EXPECT_NEAR(busy, 0.30, 0.02);
}

// Holding the token with nothing to run (alone, idle) costs a tenant nothing: its limit
// counts GPU time, not idleness.
TEST(TokenPolicy, HoldingTheTokenWithoutDemandIsNotCharged) {
  PolicyParams p;
  p.limit_window = 1s;
  TokenPolicy policy(p, {tenant(1.0, 1, 0.3)});
  std::vector<TenantActivity> activity{{true, false}};
  Nanos now{0}, used{0};
  // Works 100 ms (below its cap), idles 5 s with the token, then works for 1 s.
  const auto run = [&](Nanos until) {
    while (now < until) {
      const TokenPolicy::Decision d = policy.step(now, activity);
      const Nanos next = std::min({d.wake_at, until, now + 100us});
      if (d.holder == 0 && activity[0].demand) {
        used += next - now;
        policy.charge(0, next - now, next);
      }
      now = next;
    }
  };
  run(100ms);
  activity[0].demand = false;
  run(5100ms);
  EXPECT_EQ(policy.holder(), 0u) << "alone, it keeps the token while idle";
  activity[0].demand = true;
  const Nanos before = used;
  run(6100ms);
  EXPECT_NEAR(static_cast<double>((used - before).count()) / 1e9, 0.30, 0.02)
      << "five seconds idle with the token must not have used up its limit";
}

TEST(TokenPolicy, FiftyThirtyTwenty) {
  Sim sim({tenant(0.5), tenant(0.3), tenant(0.2)});
  sim.run(20s);
  EXPECT_NEAR(sim.fraction(0), 0.50, 0.01);
  EXPECT_NEAR(sim.fraction(1), 0.30, 0.01);
  EXPECT_NEAR(sim.fraction(2), 0.20, 0.01);
}

TEST(TokenPolicy, SharesSplitOnlyAmongTenantsWithDemand) {
  Sim sim({tenant(0.5), tenant(0.3), tenant(0.2)});
  sim.activity[0].demand = false;
  sim.run(10s);
  EXPECT_EQ(sim.used[0], Nanos{0});
  EXPECT_NEAR(sim.fraction(1), 0.60, 0.01);
}

TEST(TokenPolicy, SliceLastsOneQuantum) {
  PolicyParams p;
  p.quantum = 20ms;
  Sim sim({tenant(0.5), tenant(0.5)}, p);
  const uint32_t first = sim.policy.step(0ns, sim.activity).holder;
  sim.run(19ms);
  EXPECT_EQ(sim.policy.holder(), first);
  sim.run(2ms);
  EXPECT_NE(sim.policy.holder(), first);
}

TEST(TokenPolicy, ManyTenantsEachGetATurnWithinARound) {
  PolicyParams p;
  p.quantum = 100ms;  // 64 slices of 100 ms would be a 6.4 s round
  std::vector<TenantParams> tenants(64, tenant(1.0 / 64));
  Sim sim(tenants, p);
  sim.run(600ms);
  // Slices of round / 64 = 7.8 ms: every tenant ran within the first 500 ms, none more than
  // twice in 600 ms.
  for (size_t t = 0; t < tenants.size(); ++t) {
    EXPECT_GT(sim.used[t], Nanos{0}) << "tenant " << t << " never ran";
    EXPECT_LE(sim.used[t], 2 * 7813us) << "tenant " << t;
  }
}

TEST(TokenPolicy, FewTenantsKeepWholeQuanta) {
  PolicyParams p;
  p.quantum = 100ms;
  Sim sim({tenant(0.5), tenant(0.5)}, p);
  TokenPolicy::Decision d = sim.policy.step(sim.now, sim.activity);
  EXPECT_EQ(d.wake_at, sim.now + 100ms) << "two tenants: round / 2 = 250 ms is longer than the quantum";
}

TEST(TokenPolicy, LimitCapsATenantThatIsAlone) {
  PolicyParams p;
  p.limit_window = 1s;
  Sim sim({tenant(1.0, 1, 0.4)}, p);
  sim.run(10s);
  const double busy = static_cast<double>(sim.used[0].count()) / static_cast<double>(Nanos(10s).count());
  EXPECT_NEAR(busy, 0.40, 0.02);
}

TEST(TokenPolicy, LimitHoldsInEveryWindow) {
  PolicyParams p;
  p.limit_window = 500ms;
  Sim sim({tenant(1.0, 1, 0.3)}, p);
  Nanos before = sim.used[0];
  for (int i = 0; i < 10; ++i) {
    sim.run(500ms);
    EXPECT_LE(sim.used[0] - before, 150ms + 1ms) << "window " << i;
    before = sim.used[0];
  }
}

// Nothing but the policy's own wakes: a slice's GPU time is read in one report at its end.
// Stamped at the read, that report left the window a whole slice late, and a 30% limit gave
// 23% (seen first on the fake device, and on the H100 as seconds with a third of the work).
TEST(TokenPolicy, LimitIsExactWhenGpuTimeIsReadOnlyAtSteps) {
  for (const Nanos quantum : {Nanos(20ms), Nanos(1s)}) {
    PolicyParams p;
    p.limit_window = 1s;
    p.quantum = quantum;
    Sim sim({tenant(1.0, 1, 0.3)}, p);
    sim.step_at_most = 10s;
    sim.run(1s);  // the first window is free of history
    const Nanos before = sim.used[0];
    sim.run(200s);  // long: a window that ends within a slice is off by up to that slice
    const double busy = static_cast<double>((sim.used[0] - before).count()) / static_cast<double>(Nanos(200s).count());
    EXPECT_NEAR(busy, 0.30, 0.003) << "quantum " << quantum.count() / 1'000'000 << " ms";
  }
}

// A capped holder's queued work runs on after it loses the token: 32 ms of it made a 30%
// limit 32%; the policy learns it and caps the holder that much earlier.
TEST(TokenPolicy, LimitIsMetOnAverageWhenQueuedWorkRunsPastTheCap) {
  for (const Nanos step : {Nanos(1ms), Nanos(10s)}) {
    PolicyParams p;
    p.limit_window = 1s;
    Sim sim({tenant(1.0, 1, 0.3)}, p);
    sim.queue = 32ms;
    sim.step_at_most = step;
    sim.run(2s);
    const Nanos before = sim.used[0];
    sim.run(200s);  // long: a window that ends within a slice is off by up to that slice
    const double busy = static_cast<double>((sim.used[0] - before).count()) / static_cast<double>(Nanos(200s).count());
    EXPECT_NEAR(busy, 0.30, 0.003) << "read every " << step.count() / 1'000'000 << " ms at most";
  }
}

TEST(TokenPolicy, LimitHoldsInEveryWindowWhenGpuTimeIsReadOnlyAtSteps) {
  PolicyParams p;
  p.limit_window = 500ms;
  p.quantum = 1s;
  Sim sim({tenant(1.0, 1, 0.3)}, p);
  sim.step_at_most = 10s;
  // Every window of 500 ms that ends on a step, each 5 ms apart.
  std::vector<std::pair<Nanos, Nanos>> at;  // (time, GPU time so far)
  for (int i = 0; i < 2000; ++i) {
    sim.run(5ms);
    at.emplace_back(sim.now, sim.used[0]);
  }
  for (size_t i = 100; i < at.size(); ++i)
    EXPECT_LE(at[i].second - at[i - 100].second, 150ms + 1ms) << "window ending at " << at[i].first.count();
}

TEST(TokenPolicy, CappedTenantLeavesTheRestToOthers) {
  Sim sim({tenant(0.6, 1, 0.6), tenant(0.4)});
  sim.run(10s);
  EXPECT_NEAR(sim.fraction(0), 0.60, 0.02);
}

TEST(TokenPolicy, HigherPriorityPreemptsAtTheNextStep) {
  Sim sim({tenant(0.9, /*priority=*/0), tenant(0.1, /*priority=*/2)});
  sim.activity[1].demand = false;
  sim.run(100ms);
  EXPECT_EQ(sim.policy.holder(), 0u);
  sim.activity[1].demand = true;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, 1u);
  const Nanos low_before = sim.used[0];
  sim.run(1s);
  EXPECT_EQ(sim.used[0], low_before) << "the low tenant ran while the high one had work";
  sim.activity[1].demand = false;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, 0u);
}

TEST(TokenPolicy, AdoptedPreemptionHoldsUntilTheTenantIsIdle) {
  PolicyParams p;
  p.quantum = 10ms;
  Sim sim({tenant(0.5), tenant(0.5, /*priority=*/2)}, p);
  sim.activity[1].demand = false;
  sim.run(20ms);
  ASSERT_EQ(sim.policy.holder(), 0u);
  // The high tenant's hook took the token itself while the low one still had work queued.
  sim.activity[1].demand = true;
  sim.activity[0].queued = true;
  sim.policy.adopt(1, sim.now);
  EXPECT_EQ(sim.policy.holder(), 1u);
  EXPECT_EQ(sim.policy.draining(), kNoHolder) << "an adopted holder does not wait for a drain";
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, 1u);
  EXPECT_EQ(sim.policy.step(sim.now + 50ms, sim.activity).holder, 1u) << "its slices renew while it has work";
  sim.activity[1].demand = false;
  sim.activity[0].queued = false;
  EXPECT_EQ(sim.policy.step(sim.now + 51ms, sim.activity).holder, 0u) << "the low tenant gets it back";
}

TEST(TokenPolicy, AdoptDuringADrainEndsTheDrain) {
  PolicyParams p;
  p.quantum = 10ms;
  p.drain_timeout = 10ms;
  Sim sim({tenant(0.5, /*priority=*/0), tenant(0.5, /*priority=*/1), tenant(0.5, /*priority=*/2)}, p);
  sim.activity[1].demand = false;
  sim.activity[2].demand = false;
  sim.run(20ms);
  ASSERT_EQ(sim.policy.holder(), 0u);
  // Tenant 1 outranks the holder, whose queued work drains first ...
  sim.activity[1].demand = true;
  sim.activity[0].queued = true;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, kNoHolder);
  ASSERT_EQ(sim.policy.draining(), 0u);
  // ... when tenant 2 takes the token itself: it needs no drain, and tenant 1 keeps waiting.
  sim.activity[2].demand = true;
  sim.policy.adopt(2, sim.now + 1ms);
  EXPECT_EQ(sim.policy.draining(), kNoHolder);
  EXPECT_EQ(sim.policy.step(sim.now + 1ms, sim.activity).holder, 2u);
  sim.activity[2].demand = false;
  sim.activity[0].queued = false;
  EXPECT_EQ(sim.policy.step(sim.now + 2ms, sim.activity).holder, 1u);
}

TEST(TokenPolicy, CappedIsVisibleForTheHooks) {
  PolicyParams p;
  p.limit_window = 100ms;
  Sim sim({tenant(1.0, 2, 0.3)}, p);
  sim.run(50ms);
  EXPECT_TRUE(sim.policy.capped(0)) << "30 ms of a 100 ms window used";
  EXPECT_FALSE(sim.policy.capped(7)) << "no such tenant";
}

TEST(TokenPolicy, IdleHolderHandsOverEarly) {
  PolicyParams p;
  p.quantum = 1s;
  Sim sim({tenant(0.5), tenant(0.5)}, p);
  sim.activity[1].demand = false;
  sim.run(10ms);
  ASSERT_EQ(sim.policy.holder(), 0u);
  sim.activity[1].demand = true;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, 0u) << "slice not over yet";
  sim.activity[0].demand = false;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, 1u) << "idle holder kept the token";
}

TEST(TokenPolicy, IdleHolderKeepsTheTokenWhileNobodyElseWantsIt) {
  Sim sim({tenant(0.5), tenant(0.5)});
  sim.activity[1].demand = false;
  sim.run(10ms);
  sim.activity[0].demand = false;
  EXPECT_EQ(sim.policy.step(sim.now + 1s, sim.activity).holder, 0u);
}

TEST(TokenPolicy, RevokedHolderDrainsBeforeTheNextGrant) {
  PolicyParams p;
  p.quantum = 10ms;
  p.drain_timeout = 10ms;
  Sim sim({tenant(0.5), tenant(0.5, /*priority=*/2)}, p);
  sim.activity[1].demand = false;
  sim.run(20ms);
  ASSERT_EQ(sim.policy.holder(), 0u);
  sim.activity[1].demand = true;  // outranks the holder
  sim.activity[0].queued = true;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, kNoHolder) << "granted over queued work";
  EXPECT_EQ(sim.policy.step(sim.now + 2ms, sim.activity).holder, kNoHolder);
  sim.activity[0].queued = false;
  EXPECT_EQ(sim.policy.step(sim.now + 3ms, sim.activity).holder, 1u);
}

TEST(TokenPolicy, DrainIsBoundedByTheTimeout) {
  PolicyParams p;
  p.quantum = 10ms;
  p.drain_timeout = 5ms;
  Sim sim({tenant(0.5), tenant(0.5, /*priority=*/2)}, p);
  sim.activity[1].demand = false;
  sim.run(20ms);
  sim.activity[1].demand = true;  // outranks the holder
  sim.activity[0].queued = true;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, kNoHolder);
  EXPECT_EQ(sim.policy.step(sim.now + 5ms, sim.activity).holder, 1u);
}

TEST(TokenPolicy, IdleTimeIsNotBanked) {
  Sim sim({tenant(0.5), tenant(0.5)});
  sim.activity[1].demand = false;
  sim.run(10s);
  sim.activity[1].demand = true;
  const Nanos a = sim.used[0], b = sim.used[1];
  sim.run(2s);
  const double share_b = static_cast<double>((sim.used[1] - b).count()) /
                         static_cast<double>((sim.used[0] - a + sim.used[1] - b).count());
  EXPECT_NEAR(share_b, 0.5, 0.02) << "the returning tenant monopolised the GPU";
}

TEST(TokenPolicy, RemovedTenantLosesTheToken) {
  Sim sim({tenant(0.5), tenant(0.5)});
  sim.activity[1].demand = false;
  sim.run(5ms);
  ASSERT_EQ(sim.policy.holder(), 0u);
  sim.policy.reconfigure({}, {TenantParams{}, tenant(0.5)});
  sim.activity[1].demand = true;
  EXPECT_EQ(sim.policy.step(sim.now, sim.activity).holder, 1u);
}

TEST(TokenPolicy, AsksToBeWokenAtTheEndOfTheSliceOnlyUnderContention) {
  PolicyParams p;
  p.quantum = 20ms;
  TokenPolicy policy(p, {tenant(0.5), tenant(0.5)});
  auto d = policy.step(0ns, {{true, false}, {false, false}});
  EXPECT_EQ(d.wake_at, TokenPolicy::kNever);
  d = policy.step(5ms, {{true, false}, {true, false}});
  EXPECT_EQ(d.wake_at, Nanos(20ms));
}

}  // namespace
}  // namespace cuslice
