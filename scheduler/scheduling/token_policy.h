// Who holds one GPU's token: the scheduling policy, with no I/O and no clock of its own.
//
// The daemon runs one TokenPolicy per GPU. At every step it passes the current time and, per
// tenant, whether the tenant wants the GPU and whether it still has work queued; the policy
// answers with the holder and when it wants to be asked again. GPU time reported by the
// hooks is fed in with charge(). Tests drive it with a simulated clock.
//
// Rules, in order:
//   1. Priority is strict: a tenant with demand takes the GPU from any lower-priority holder
//      at the next step, whatever the shares.
//   2. Within a priority, shares are met by stride scheduling: each tenant's pass is its GPU
//      time divided by its share; when a slice ends the tenant with the lowest pass gets the
//      next one. A slice is one quantum, or shorter with many tenants competing: `round`
//      divided by their number, at least `min_slice`. A tenant that comes back from idle starts at the lowest pass of
//      the tenants already competing, so idleness is not banked.
//   3. A limit caps GPU time over a sliding window even when the tenant is alone: once its
//      GPU time within the last `limit_window` reaches limit x window, less what its queue
//      will still run (learnt), it loses the token until old time leaves the window, with a
//      margin (docs/design/scheduler.md, rule 3).
//   4. Work-conserving: a holder without demand keeps the token only while nobody else is
//      eligible, so others never wait for an idle tenant's slice to end. What it gives up
//      early is lent, not lost: when it has demand again and is the most deserving (lowest
//      pass), it takes the token back at the next step, and a pause shorter than a quantum
//      does not count as coming back from idle (rule 2). Applications that synchronise
//      often (a pause per step) thus keep their share.
//   5. A revoked holder's queued work drains before the next tenant is granted (bounded by
//      drain_timeout), so that GPU time is charged to whoever really ran.
//   6. A waiting tenant that outranks the holder (or the tenant draining) and is not capped
//      takes the token at once, without waiting for the drain: the daemon finds it in the
//      step the tenant's kick triggers (shm_protocol.h, "Priority takeover") and reports
//      it with adopt(); the new holder's slice starts then. Its work overlaps the previous
//      holder's last queued kernels, which that tenant's hook keeps short; rule 1 applied
//      at the speed of one round trip through the daemon.
//
// What a tenant is charged is the larger of the GPU time its hooks report and the wall time
// it held the token with demand: the reports come from the tenant's own processes, and one
// that reports less (or nothing) must not keep a low pass or stay under its limit. The
// reports may run ahead of the holding (several streams, work draining after a revocation);
// that lead is kept for at most kReportLead, so that it cannot be saved up for later.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "scheduler/tenants/tenant_params.h"

namespace cuslice {

inline constexpr uint32_t kNoHolder = UINT32_MAX;

struct TenantActivity {
  bool demand = false;  // some process waits for the token or has work queued
  bool queued = false;  // some process has work queued and is not blocked waiting
};

struct PolicyParams {
  std::chrono::nanoseconds quantum{std::chrono::milliseconds(20)};
  // With many tenants contending, a slice shrinks so that each gets a turn within `round`,
  // but never below `min_slice`: 64 tenants with 100 ms slices waited 6.4 s for a turn.
  std::chrono::nanoseconds round{std::chrono::milliseconds(500)};
  std::chrono::nanoseconds min_slice{std::chrono::milliseconds(5)};
  std::chrono::nanoseconds limit_window{std::chrono::seconds(1)};
  std::chrono::nanoseconds drain_timeout{std::chrono::milliseconds(20)};
  // While draining, how often the daemon should look again.
  std::chrono::nanoseconds drain_poll{std::chrono::milliseconds(1)};
};

class TokenPolicy {
 public:
  using Nanos = std::chrono::nanoseconds;
  static constexpr Nanos kNever = Nanos::max();

  struct Decision {
    uint32_t holder = kNoHolder;
    Nanos wake_at = kNever;  // call step() again no later than this
  };

  TokenPolicy(const PolicyParams& params, std::vector<TenantParams> tenants);

  // New parameters (e.g. after a reload). Accounting of tenants that stay is kept; a tenant
  // that is no longer present loses the token at the next step.
  void reconfigure(const PolicyParams& params, std::vector<TenantParams> tenants);

  // GPU time used by `tenant`, reported at `now`.
  void charge(uint32_t tenant, Nanos gpu_time, Nanos now);

  // `activity` has one entry per tenant index (same size as the tenant parameters).
  Decision step(Nanos now, const std::vector<TenantActivity>& activity);

  uint32_t holder() const { return holder_; }
  // The tenant whose queued work is draining before the next grant, or kNoHolder.
  uint32_t draining() const { return draining_; }
  // `tenant` takes the token at `now` by outranking (rule 6): it holds it from now, nobody
  // drains.
  void adopt(uint32_t tenant, Nanos now);
  // Whether `tenant` reached its limit (rule 3) as of the last step.
  bool capped(uint32_t tenant) const;

 private:
  // GPU time reported at one step, spread evenly over the span it can have been used in:
  // back from the step by its own length, but not before the previous report (several
  // streams can use more GPU time than wall time). The daemon reads the hooks' reports only
  // when it steps, often once at the end of a long slice: stamping all of it at the read
  // kept a whole slice in the window until a window after its end (a 30% limit gave 23%).
  struct Charge {
    Nanos from{0}, to{0};
    Nanos amount{0};
  };
  struct Account {
    // Since the start: GPU time the hooks reported, wall time holding the token with demand,
    // and what was charged (the larger of the two as each grew).
    Nanos reported{0}, held{0}, charged{0};
    double pass = 0;  // GPU time / share, in nanoseconds
    bool competing = false;
    std::deque<Charge> window;  // oldest first, not overlapping
    Nanos window_sum{0};        // of the charges in `window`
    Nanos front_expired{0};     // the part of the oldest charge already out of the window
    Nanos idle_since{0};        // when it last stopped competing
    bool capped = false;        // reached its limit, and not yet back below it by the margin
    // A capped holder's queued work still runs after it loses the token, and is charged then:
    // the GPU time reported from that loss to its next grant (learnt, see cap_at()).
    Nanos overshoot{0};
    bool learning = false;
    Nanos drained{0};
  };

  // How far reported GPU time may run ahead of the time held before the excess stops counting.
  static constexpr Nanos kReportLead = std::chrono::seconds(1);

  // Charges `t` whatever of max(reported, held) it has not been charged yet, at `now`.
  void settle(uint32_t t, Nanos now);
  // Spends `amount` of GPU time, used up to `now`, in `t`'s pass and limit window.
  void spend(uint32_t t, Nanos amount, Nanos now);
  // Adds the wall time since the last call to the holder's time held, if it had demand.
  void accrue(Nanos now);
  // step() without the accounting of the time held.
  Decision decide(Nanos now, const std::vector<TenantActivity>& activity);
  // decide()'s steps. While the revoked holder's queued work drains (until its timeout), the
  // wait; nothing once it drained.
  std::optional<Decision> wait_for_drain(Nanos now, const std::vector<TenantActivity>& activity);
  // Whether the holder `h` keeps the token against `best`, the most deserving now (a new
  // slice starts when its slice ended and it is still the most deserving); `lends` set when
  // it gives up an idle slice early.
  bool holder_keeps(uint32_t h, uint32_t best, Nanos now, const std::vector<TenantActivity>& activity, bool& lends);
  // Takes the token from `h`; the drain to wait for when its work is still queued.
  std::optional<Decision> release_holder(uint32_t h, bool lends, Nanos now, const std::vector<TenantActivity>& activity);
  // Gives the token to the most deserving tenant, if any.
  Decision grant_best(Nanos now, const std::vector<TenantActivity>& activity);

  // GPU time within the window, as of the last expire_window().
  static Nanos used(const Account& a) { return a.window_sum - a.front_expired; }
  Nanos allowed(uint32_t t) const;
  // How far below cap_at() a capped tenant must fall before it runs again.
  Nanos margin(uint32_t t) const;
  // GPU time within the window at which a tenant is capped.
  Nanos cap_at(uint32_t t) const;
  void expire_window(uint32_t t, Nanos now);
  void granted(uint32_t t);
  // When a capped tenant's GPU time within the window falls below cap_at() - margin(), if it
  // runs no more.
  Nanos uncapped_at(uint32_t t) const;
  // The slice length now: quantum, or round / tenants competing when that is shorter.
  Nanos slice() const;
  bool eligible(uint32_t t, const std::vector<TenantActivity>& activity) const;
  uint32_t pick(const std::vector<TenantActivity>& activity) const;
  void update_competition(const std::vector<TenantActivity>& activity, Nanos now);
  Nanos holder_wake(Nanos now, const std::vector<TenantActivity>& activity) const;
  Nanos idle_wake(const std::vector<TenantActivity>& activity) const;

  PolicyParams params_;
  std::vector<TenantParams> tenants_;
  std::vector<Account> accounts_;
  uint32_t holder_ = kNoHolder;
  Nanos granted_at_{0};
  uint32_t lender_ = kNoHolder;  // gave the token up early, before its slice ended
  uint32_t draining_ = kNoHolder;
  Nanos drain_started_{0};
  Nanos accrued_at_{0};          // the holder's time held is counted up to here
  bool holder_demand_ = false;   // whether the holder had demand at the last step
};

}  // namespace cuslice
