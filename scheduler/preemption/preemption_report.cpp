// PreemptionReport (preemption_report.h): the status lines and the metrics' figures.
#include "scheduler/preemption/preemption_report.h"

namespace cuslice {

PreemptionReport::PreemptionReport(const SharedSegment& segment, const TenantTable& tenants, const MemoryFacts& facts,
                                   const MemoryPreemption& policy, const SuspensionOperations& operations,
                                   const MemoryRequests& requests)
    : segment_(segment),
      tenants_(tenants),
      facts_(facts),
      policy_(policy),
      operations_(operations),
      requests_(requests) {}

std::string PreemptionReport::facts_line(uint32_t t, const PreemptTenant& tenant) const {
  uint64_t pool = 0, movable = 0;
  for (const PreemptProcess& p : tenant.processes) {
    pool += p.pool_bytes;
    movable += p.movable ? p.movable_bytes : 0;
  }
  const SuspensionOutcomes::Last& last = operations_.last(t);
  return std::string("@facts\t") + segment_->tenants[t].name + "\t" + (*last.path ? last.path : "-") + "\t" +
         std::to_string(last.moved_out) + "\t" + std::to_string(pool) + "\t" + std::to_string(movable) + "\t" +
         std::to_string(requests_.time_to_room(t).count());
}

std::string PreemptionReport::reason(uint32_t t, const PreemptTenant& tenant) const {
  std::string reason = policy_.reason(t);
  if (policy_.state(t) != SuspendState::kRunning || !reason.empty()) return reason;
  // What a preemptible tenant's processes say of themselves is reported while they run.
  reason = tenant.preemptible ? describe_claims(tenant) : "";
  if (!reason.empty()) {
    reason += tenants_.config().scheduler.preemption.stop_unsuspendable
                  ? ": stopped rather than suspended when its memory is needed (unsuspendable: stop)"
                  : ": the tenant is never suspended while it runs (unsuspendable: keep)";
  }
  if (const std::string* refusal = requests_.last_refusal(t))
    reason += (reason.empty() ? "" : "; ") + std::string("last request refused: ") + *refusal;
  return reason;
}

std::vector<std::string> PreemptionReport::lines() const {
  std::vector<std::string> lines;
  const std::vector<PreemptTenant> tenants = facts_.tenants(operations_.suspensions());
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (segment_->tenants[t].state.load() == shm::Tenant::kFree) continue;
    if (tenants[t].preemptible || requests_.time_to_room(t).count() > 0) lines.push_back(facts_line(t, tenants[t]));
    const std::string why = reason(t, tenants[t]);
    const SuspendState state = policy_.state(t);
    if (state == SuspendState::kRunning && why.empty()) continue;
    lines.push_back(std::string(segment_->tenants[t].name) + "\t" + to_string(state) + "\t" + why);
  }
  return lines;
}

TenantPreemptionFigures PreemptionReport::figures() const {
  TenantPreemptionFigures out;
  const std::vector<PreemptTenant> tenants = facts_.tenants(operations_.suspensions());
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenants[t].present) continue;
    PreemptionFigures f;
    const SuspensionOutcomes::Last& last = operations_.last(t);
    f.fast = std::string(last.path) == "fast";
    f.moved_out = last.moved_out;
    f.time_to_room = static_cast<double>(requests_.time_to_room(t).count()) / 1e9;
    for (const PreemptProcess& p : tenants[t].processes) f.host_pool += p.pool_bytes;
    out[tenants[t].name] = f;
  }
  return out;
}

}  // namespace cuslice
