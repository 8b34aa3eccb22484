#include "token_policy.h"

#include <algorithm>
#include <limits>

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
  Account& a = accounts_[tenant];
  a.pass += static_cast<double>(gpu_time.count()) / std::max(tenants_[tenant].share, 1e-6);
  if (tenants_[tenant].limit < 1.0) {
    a.window.emplace_back(now, gpu_time);
    a.window_sum += gpu_time;
  }
}

void TokenPolicy::adopt(uint32_t tenant, Nanos now) {
  if (tenant >= tenants_.size() || tenant == holder_) return;
  holder_ = tenant;
  granted_at_ = now;
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

void TokenPolicy::expire_window(Account& a, Nanos now) const {
  while (!a.window.empty() && a.window.front().first <= now - params_.limit_window) {
    a.window_sum -= a.window.front().second;
    a.window.pop_front();
  }
}

bool TokenPolicy::capped(uint32_t t) const {
  if (t >= tenants_.size()) return false;
  const double allowed = tenants_[t].limit * static_cast<double>(params_.limit_window.count());
  return tenants_[t].limit < 1.0 && static_cast<double>(accounts_[t].window_sum.count()) >= allowed;
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
    // A capped tenant with demand becomes eligible when its oldest time leaves the window.
    wake = std::min(wake, accounts_[t].window.front().first + params_.limit_window);
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
    // The earliest the holder could reach its cap, if it ran without pause from now.
    const double left = h.limit * static_cast<double>(params_.limit_window.count()) -
                        static_cast<double>(accounts_[holder_].window_sum.count());
    wake = std::min(wake, now + std::max(params_.drain_poll, Nanos(static_cast<int64_t>(left))));
  }
  return wake;
}

TokenPolicy::Decision TokenPolicy::step(Nanos now, const std::vector<TenantActivity>& activity) {
  for (Account& a : accounts_) expire_window(a, now);
  update_competition(activity, now);

  if (draining_ != kNoHolder) {
    const Nanos deadline = drain_started_ + params_.drain_timeout;
    if (activity[draining_].queued && now < deadline)
      return {kNoHolder, std::min(now + params_.drain_poll, deadline)};
    draining_ = kNoHolder;
  }

  if (holder_ != kNoHolder) {
    const uint32_t h = holder_;
    const uint32_t best = pick(activity);
    bool keep;
    bool lends = false;
    if (!tenants_[h].present || capped(h)) {
      keep = false;
    } else if (!activity[h].demand) {
      keep = best == kNoHolder;  // idle: hold on only while nobody else could use the GPU
      lends = !keep && now - granted_at_ < slice();
    } else if (best != h && tenants_[best].priority > tenants_[h].priority) {
      keep = false;  // strict priority: preempt now
    } else if (best == lender_ && best != h && tenants_[best].priority >= tenants_[h].priority) {
      keep = false;  // the lender is back and the most deserving: its slice resumes
    } else if (now - granted_at_ >= slice()) {
      keep = best == h;
      if (keep) granted_at_ = now;  // still the most deserving: a new slice
    } else {
      keep = true;
    }
    if (keep) return {h, holder_wake(now, activity)};
    lender_ = lends ? h : kNoHolder;
    holder_ = kNoHolder;
    if (activity[h].queued && params_.drain_timeout > Nanos{0}) {
      draining_ = h;
      drain_started_ = now;
      return {kNoHolder, now + std::min(params_.drain_poll, params_.drain_timeout)};
    }
  }

  const uint32_t best = pick(activity);
  if (best == kNoHolder) return {kNoHolder, idle_wake(activity)};
  if (best == lender_) lender_ = kNoHolder;
  holder_ = best;
  granted_at_ = now;
  return {best, holder_wake(now, activity)};
}

}  // namespace cuslice
