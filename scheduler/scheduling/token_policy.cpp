#include "scheduler/scheduling/token_policy.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace cuslice {

TokenPolicy::TokenPolicy(const PolicyParams& params, std::vector<TenantParams> tenants) {
  reconfigure(params, std::move(tenants));
}

void TokenPolicy::reconfigure(const PolicyParams& params, std::vector<TenantParams> tenants) {
  params_ = params;
  tenants_ = std::move(tenants);
  accounts_.resize(tenants_.size());
  if (holder_ != kNoHolder && holder_ >= tenants_.size()) holder_ = kNoHolder;
  if (draining_ != kNoHolder && draining_ >= tenants_.size()) draining_ = kNoHolder;
}

void TokenPolicy::charge(uint32_t tenant, Nanos gpu_time, Nanos now) {
  if (tenant >= tenants_.size() || gpu_time <= Nanos{0}) return;
  accounts_[tenant].reported += gpu_time;
  settle(tenant, now);
}

void TokenPolicy::accrue(Nanos now) {
  if (holder_ != kNoHolder && holder_ < accounts_.size() && holder_demand_ && now > accrued_at_) {
    accounts_[holder_].held += now - accrued_at_;
    settle(holder_, now);
  }
  accrued_at_ = now;
}

void TokenPolicy::settle(uint32_t t, Nanos now) {
  Account& a = accounts_[t];
  a.held = std::max(a.held, a.reported - kReportLead);
  const Nanos due = std::max(a.reported, a.held);
  if (due <= a.charged) return;
  spend(t, due - a.charged, now);
  a.charged = due;
}

void TokenPolicy::spend(uint32_t tenant, Nanos gpu_time, Nanos now) {
  Account& a = accounts_[tenant];
  if (a.learning) a.drained += gpu_time;
  a.pass += static_cast<double>(gpu_time.count()) / std::max(tenants_[tenant].share, 1e-6);
  if (tenants_[tenant].limit < 1.0) {
    a.window_sum += gpu_time;
    if (!a.window.empty() && a.window.back().to >= now) {
      a.window.back().amount += gpu_time;  // a second report at the same step
      return;
    }
    Nanos from = now - gpu_time;
    if (!a.window.empty()) from = std::max(from, a.window.back().to);
    a.window.push_back({from, now, gpu_time});
  }
}

void TokenPolicy::adopt(uint32_t tenant, Nanos now) {
  if (tenant >= tenants_.size() || tenant == holder_) return;
  accrue(now);
  holder_ = tenant;
  holder_demand_ = true;  // it waits for the token
  granted_at_ = now;
  granted(tenant);
  draining_ = kNoHolder;
  if (lender_ == tenant) lender_ = kNoHolder;
}

TokenPolicy::Nanos TokenPolicy::slice() const {
  int64_t competing = 0;
  for (uint32_t t = 0; t < tenants_.size(); ++t) competing += tenants_[t].present && accounts_[t].competing;
  if (competing <= 1) return params_.quantum;
  const Nanos fair = params_.round / competing;
  return std::min(params_.quantum, std::max(params_.min_slice, fair));
}

namespace {
// The part of `c` used before `edge`, with its time spread evenly over [from, to].
TokenPolicy::Nanos before(TokenPolicy::Nanos edge, TokenPolicy::Nanos from, TokenPolicy::Nanos to,
                          TokenPolicy::Nanos amount) {
  if (edge <= from) return TokenPolicy::Nanos{0};
  if (edge >= to) return amount;
  return TokenPolicy::Nanos(static_cast<int64_t>(static_cast<double>(amount.count()) *
                                                 static_cast<double>((edge - from).count()) /
                                                 static_cast<double>((to - from).count())));
}
}  // namespace

TokenPolicy::Nanos TokenPolicy::allowed(uint32_t t) const {
  return Nanos(static_cast<int64_t>(tenants_[t].limit * static_cast<double>(params_.limit_window.count())));
}

TokenPolicy::Nanos TokenPolicy::margin(uint32_t t) const {
  // The reports read at one step can lag the GPU by a poll, so time in the window is placed
  // to within a millisecond or two: without a margin, the edge passing such a gap capped a
  // tenant that had just resumed, and each resumption cost it a hand-over (29.4% for 30%).
  return std::min<Nanos>(std::chrono::milliseconds(5), allowed(t) / 10);
}

TokenPolicy::Nanos TokenPolicy::cap_at(uint32_t t) const {
  // A tenant that always has work runs one slice a window: capped at X, its queued work (d)
  // still runs, and it resumes when the window's edge has passed enough of that slice for
  // the time within to be X - margin (m). That is X + d of GPU time every W + d + m: the limit
  // L on average needs X = L*W - (1 - L)*d + L*m. Capped at L*W, a 30% limit with 32 ms
  // queued gave 32%. The L*m is left out, so that no window holds more than L*W when d is
  // small: on average that costs L*m/W (0.15 points of a 30% limit over 1 s).
  const double lower = (1.0 - tenants_[t].limit) * static_cast<double>(accounts_[t].overshoot.count());
  return allowed(t) - std::min(Nanos(static_cast<int64_t>(lower)), allowed(t) / 2);
}

void TokenPolicy::expire_window(uint32_t t, Nanos now) {
  Account& a = accounts_[t];
  const Nanos edge = now - params_.limit_window;
  while (!a.window.empty() && a.window.front().to <= edge) {
    a.window_sum -= a.window.front().amount;
    a.window.pop_front();
  }
  a.front_expired = a.window.empty() ? Nanos{0}
                                     : before(edge, a.window.front().from, a.window.front().to, a.window.front().amount);
  if (tenants_[t].limit >= 1.0)
    a.capped = false;
  else
    a.capped = used(a) >= cap_at(t) - (a.capped ? margin(t) : Nanos{0});
}

void TokenPolicy::granted(uint32_t t) {
  Account& a = accounts_[t];
  if (!a.learning) return;
  a.learning = false;
  a.overshoot = a.overshoot == Nanos{0} ? a.drained : (a.overshoot + a.drained) / 2;
}

bool TokenPolicy::capped(uint32_t t) const {
  if (t >= tenants_.size()) return false;
  return accounts_[t].capped;
}

TokenPolicy::Nanos TokenPolicy::uncapped_at(uint32_t t) const {
  const Account& a = accounts_[t];
  // Oldest first, the GPU time that must leave the window; the wake is when the last of it has.
  Nanos excess = used(a) - (cap_at(t) - margin(t));
  Nanos expired = a.front_expired;
  for (const Charge& c : a.window) {
    const Nanos left = c.amount - expired;
    if (left > excess) {
      // Within this charge: the edge must pass `expired + excess` of it, plus a little so that
      // what remains is below the level it resumes at (cap_at() - margin()).
      Nanos edge = c.from;
      const Nanos span = c.to - c.from;
      const double part = static_cast<double>((expired + excess).count()) / static_cast<double>(c.amount.count());
      edge += Nanos(static_cast<int64_t>(part * static_cast<double>(span.count())));
      return edge + params_.limit_window + std::chrono::microseconds(1);
    }
    excess -= left;
    expired = Nanos{0};
  }
  return a.window.empty() ? Nanos{0} : a.window.back().to + params_.limit_window;
}

bool TokenPolicy::eligible(uint32_t t, const std::vector<TenantActivity>& activity) const {
  return tenants_[t].present && activity[t].demand && !capped(t);
}

uint32_t TokenPolicy::pick(const std::vector<TenantActivity>& activity) const {
  uint32_t best = kNoHolder;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (!eligible(t, activity)) continue;
    if (best == kNoHolder || tenants_[t].priority > tenants_[best].priority ||
        (tenants_[t].priority == tenants_[best].priority && accounts_[t].pass < accounts_[best].pass))
      best = t;
  }
  return best;
}

void TokenPolicy::update_competition(const std::vector<TenantActivity>& activity, Nanos now) {
  double floor = std::numeric_limits<double>::infinity();
  for (uint32_t t = 0; t < tenants_.size(); ++t)
    if (tenants_[t].present && accounts_[t].competing) floor = std::min(floor, accounts_[t].pass);
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    Account& a = accounts_[t];
    const bool demand = tenants_[t].present && activity[t].demand;
    // Coming back from idle: start level with the others instead of spending banked time. A
    // pause shorter than a quantum (a synchronisation between steps) is not idleness.
    if (!demand && a.competing) a.idle_since = now;
    if (demand && !a.competing && floor != std::numeric_limits<double>::infinity() &&
        now - a.idle_since >= params_.quantum)
      a.pass = std::max(a.pass, floor);
    a.competing = demand;
  }
}

TokenPolicy::Nanos TokenPolicy::idle_wake(const std::vector<TenantActivity>& activity) const {
  Nanos wake = kNever;
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (t == holder_ || !tenants_[t].present || !activity[t].demand || !capped(t)) continue;
    // A capped tenant with demand becomes eligible when enough old time has left the window.
    wake = std::min(wake, uncapped_at(t));
  }
  return wake;
}

TokenPolicy::Nanos TokenPolicy::holder_wake(Nanos now, const std::vector<TenantActivity>& activity) const {
  Nanos wake = idle_wake(activity);
  for (uint32_t t = 0; t < tenants_.size(); ++t) {
    if (t != holder_ && eligible(t, activity)) {
      wake = std::min(wake, granted_at_ + slice());
      break;
    }
  }
  const TenantParams& h = tenants_[holder_];
  if (h.limit < 1.0) {
    // The earliest the holder could reach its cap, if it ran without pause from now; and at
    // least every quantum, so that its reports are read (and placed in time) in small parts.
    const Nanos left = cap_at(holder_) - used(accounts_[holder_]);
    wake = std::min(wake, now + std::clamp(left, params_.drain_poll, std::max(params_.drain_poll, params_.quantum)));
  }
  return wake;
}

TokenPolicy::Decision TokenPolicy::step(Nanos now, const std::vector<TenantActivity>& activity) {
  accrue(now);
  const Decision d = decide(now, activity);
  holder_demand_ = d.holder != kNoHolder && d.holder < activity.size() && activity[d.holder].demand;
  return d;
}

TokenPolicy::Decision TokenPolicy::decide(Nanos now, const std::vector<TenantActivity>& activity) {
  for (uint32_t t = 0; t < accounts_.size(); ++t) expire_window(t, now);
  update_competition(activity, now);

  if (const std::optional<Decision> d = wait_for_drain(now, activity)) return *d;
  if (holder_ != kNoHolder) {
    const uint32_t h = holder_;
    bool lends = false;
    if (holder_keeps(h, pick(activity), now, activity, lends)) return {h, holder_wake(now, activity)};
    if (const std::optional<Decision> d = release_holder(h, lends, now, activity)) return *d;
  }
  return grant_best(now, activity);
}

std::optional<TokenPolicy::Decision> TokenPolicy::wait_for_drain(Nanos now,
                                                                  const std::vector<TenantActivity>& activity) {
  if (draining_ == kNoHolder) return std::nullopt;
  const Nanos deadline = drain_started_ + params_.drain_timeout;
  if (activity[draining_].queued && now < deadline) return Decision{kNoHolder, std::min(now + params_.drain_poll, deadline)};
  draining_ = kNoHolder;
  return std::nullopt;
}

bool TokenPolicy::holder_keeps(uint32_t h, uint32_t best, Nanos now, const std::vector<TenantActivity>& activity,
                               bool& lends) {
  if (!tenants_[h].present || capped(h)) return false;
  if (!activity[h].demand) {
    const bool keep = best == kNoHolder;  // idle: hold on only while nobody else could use the GPU
    lends = !keep && now - granted_at_ < slice();
    return keep;
  }
  if (best != h && tenants_[best].priority > tenants_[h].priority) return false;  // strict priority: yield now
  if (best == lender_ && best != h && tenants_[best].priority >= tenants_[h].priority)
    return false;  // the lender is back and the most deserving: its slice resumes
  if (now - granted_at_ >= slice()) {
    const bool keep = best == h;
    if (keep) granted_at_ = now;  // still the most deserving: a new slice
    return keep;
  }
  return true;
}

std::optional<TokenPolicy::Decision> TokenPolicy::release_holder(uint32_t h, bool lends, Nanos now,
                                                                  const std::vector<TenantActivity>& activity) {
  if (capped(h) && tenants_[h].present) {
    accounts_[h].learning = true;
    accounts_[h].drained = Nanos{0};
  }
  lender_ = lends ? h : kNoHolder;
  holder_ = kNoHolder;
  if (!activity[h].queued || params_.drain_timeout <= Nanos{0}) return std::nullopt;
  draining_ = h;
  drain_started_ = now;
  return Decision{kNoHolder, now + std::min(params_.drain_poll, params_.drain_timeout)};
}

TokenPolicy::Decision TokenPolicy::grant_best(Nanos now, const std::vector<TenantActivity>& activity) {
  const uint32_t best = pick(activity);
  if (best == kNoHolder) return {kNoHolder, idle_wake(activity)};
  if (best == lender_) lender_ = kNoHolder;
  holder_ = best;
  granted_at_ = now;
  granted(best);
  return {best, holder_wake(now, activity)};
}

}  // namespace cuslice
