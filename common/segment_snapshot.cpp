// take_snapshot (segment_snapshot.h): the GPUs in use, then each tenant entry with its use of
// each of them, then the processes by tenant; everything read relaxed, as a picture, not a lock.
#include "common/segment_snapshot.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "protocol/ppm.h"
#include "config/tenant_config.h"  // valid_tenant_name, excerpt

namespace cuslice {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

bool tenant_present(const shm::Tenant& t) {
  return t.state.load(std::memory_order_acquire) != shm::Tenant::kFree;
}

bool allowed_everywhere(const shm::Tenant& t) {
  for (const shm::TenantGpu& tg : t.gpu)
    if (tg.share_ppm.load(kRelaxed) == 0) return false;
  return true;
}

}  // namespace

bool gpu_in_use(const shm::Segment& segment, uint32_t gpu) {
  const shm::GpuState& g = segment.gpus[gpu];
  if (g.memory_total.load(kRelaxed) != 0 || g.handoffs.load(kRelaxed) != 0 ||
      g.holder.load(kRelaxed) != shm::kNoTenant || g.unhooked_processes.load(kRelaxed) != 0)
    return true;
  for (const shm::Tenant& t : segment.tenants) {
    if (!tenant_present(t)) continue;
    const shm::TenantGpu& tg = t.gpu[gpu];
    if (tg.memory_used.load(kRelaxed) || tg.gpu_time_ns.load(kRelaxed) || tg.wait_ns.load(kRelaxed) ||
        tg.oom_refusals.load(kRelaxed))
      return true;
    // A tenant given some GPUs only (`gpus`, a pod's GPU) shows its GPUs before any of its
    // processes runs there; one allowed everywhere names no GPU in particular.
    if (tg.share_ppm.load(kRelaxed) != 0 && !allowed_everywhere(t)) return true;
  }
  return false;
}

std::string format_gpu_uuid(const std::array<uint64_t, 2>& words) {
  unsigned char b[16];
  std::memcpy(b, words.data(), sizeof b);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

const char* priority_name(uint32_t priority) {
  switch (priority) {
    case 0: return "low";
    case 2: return "high";
    default: return "normal";
  }
}

namespace {

GpuSnapshot gpu_snapshot(const shm::GpuState& gs, uint32_t g) {
  GpuSnapshot gpu;
  gpu.index = g;
  gpu.memory_total = gs.memory_total.load(kRelaxed);
  const std::array<uint64_t, 2> uuid{gs.uuid[0].load(kRelaxed), gs.uuid[1].load(kRelaxed)};
  if (uuid[0] != 0 || uuid[1] != 0) gpu.uuid = format_gpu_uuid(uuid);
  const uint32_t holder = gs.holder.load(std::memory_order_acquire);
  if (holder < shm::kMaxTenants) gpu.holder = holder;
  gpu.group_holds = holder == shm::kSpatialGroup;
  gpu.handoffs = gs.handoffs.load(kRelaxed);
  gpu.unhooked_processes = gs.unhooked_processes.load(kRelaxed);
  gpu.unhooked_bytes = gs.unhooked_bytes.load(kRelaxed);
  return gpu;
}

// Tenant entry i's use of the k-th GPU in use.
TenantGpuSnapshot tenant_gpu_snapshot(const TenantSnapshot& tenant, const shm::TenantGpu& tg, const GpuSnapshot& gpu,
                                      uint32_t i, size_t k) {
  TenantGpuSnapshot use;
  use.gpu = k;
  use.memory_used = tg.memory_used.load(kRelaxed);
  if (tenant.memory_quota_bytes) {
    use.memory_quota = tenant.memory_quota_bytes;
  } else if (tenant.memory_quota_ppm && gpu.memory_total != 0) {
    // Resolved as the hook resolves it, against the total the hook reported.
    use.memory_quota = ppm_of_bytes(gpu.memory_total, *tenant.memory_quota_ppm);
  }
  use.gpu_time_ns = tg.gpu_time_ns.load(kRelaxed);
  use.wait_ns = tg.wait_ns.load(kRelaxed);
  use.oom_refusals = tg.oom_refusals.load(kRelaxed);
  use.token_grants = tg.token_grants.load(kRelaxed);
  use.achieved_share_ppm = tg.achieved_share_ppm.load(kRelaxed);
  use.holds_token = gpu.holder == i;
  use.over_quota_bytes = tg.over_quota_bytes.load(kRelaxed);
  use.watchdog_kills = tg.watchdog_kills.load(kRelaxed);
  use.bytes_moved = uint64_t{tg.moved_mib.load(kRelaxed)} << 20;
  return use;
}

// Minor 3 says which GPUs a tenant may use, and its share of each; older daemons did not.
void per_gpu_share(TenantGpuSnapshot& use, const shm::TenantGpu& tg, uint32_t tenant_share_ppm, uint16_t abi_minor) {
  if (abi_minor < 3) {
    use.share_ppm = tenant_share_ppm;
    return;
  }
  use.share_ppm = tg.share_ppm.load(kRelaxed);
  use.allowed = use.share_ppm != 0;
}

TenantSnapshot tenant_snapshot(const shm::Tenant& t, uint32_t i, uint32_t state, const std::vector<GpuSnapshot>& gpus,
                               uint16_t abi_minor) {
  TenantSnapshot tenant;
  tenant.index = i;
  // The daemon writes only tenant names, but `cuslice status` maps whatever segment it is
  // pointed at (another version's, a stale one): anything else is shown escaped, so that
  // JSON, a terminal and a metric label always get printable UTF-8.
  const std::string_view raw(t.name, strnlen(t.name, sizeof t.name));
  tenant.name = valid_tenant_name(raw) ? std::string(raw) : excerpt(raw);
  tenant.retired = state == shm::Tenant::kRetired;
  tenant.priority = t.priority.load(kRelaxed);
  tenant.share_ppm = t.share_ppm.load(kRelaxed);
  tenant.limit_ppm = t.limit_ppm.load(kRelaxed);
  const uint64_t quota = t.memory_quota.load(kRelaxed);
  const uint32_t quota_ppm = std::min<uint32_t>(t.memory_quota_ppm.load(kRelaxed), 1'000'000);
  if (quota_ppm != 0) tenant.memory_quota_ppm = quota_ppm;
  else if (quota != shm::kUnlimited) tenant.memory_quota_bytes = quota;
  // Words of minor 3, zero from an older daemon (they were padding): running, no counts.
  const uint32_t preemption = t.preemption.load(kRelaxed);
  tenant.preemptible = (preemption & shm::Tenant::kPreemptible) != 0;
  const uint32_t suspension = preemption & shm::Tenant::kStateMask;
  tenant.suspension = suspension <= shm::Tenant::kSuspendFailed ? static_cast<shm::Tenant::Preemption>(suspension)
                                                                 : shm::Tenant::kRunning;
  tenant.suspensions = t.suspensions.load(kRelaxed);
  tenant.suspended_ns = t.suspended_ns.load(kRelaxed);
  tenant.suspend_ns = t.suspend_ns.load(kRelaxed);
  tenant.resume_ns = t.resume_ns.load(kRelaxed);
  for (size_t k = 0; k < gpus.size(); ++k) {
    tenant.gpus.push_back(tenant_gpu_snapshot(tenant, t.gpu[gpus[k].index], gpus[k], i, k));
    per_gpu_share(tenant.gpus.back(), t.gpu[gpus[k].index], tenant.share_ppm, abi_minor);
  }
  return tenant;
}

// Where tenant entry i runs side by side (minor 5), and with how many SMs.
void spatial_snapshot(TenantSnapshot& tenant, const shm::TenantSpatial& ts, const std::vector<GpuSnapshot>& gpus) {
  const uint32_t sm = ts.sm_percent.load(kRelaxed);
  tenant.sm_percent = sm >= 1 && sm <= 100 ? sm : 100;
  const uint32_t group = ts.group_gpus.load(kRelaxed);
  for (size_t k = 0; k < gpus.size(); ++k) {
    TenantGpuSnapshot& use = tenant.gpus[k];
    use.spatial = ((group >> gpus[k].index) & 1u) != 0;
    if (use.spatial && gpus[k].group_holds) use.holds_token = true;
  }
}

}  // namespace

SegmentSnapshot take_snapshot(const shm::Segment& segment) {
  SegmentSnapshot s;
  s.abi_major = segment.abi_major;
  s.abi_minor = segment.abi_minor;
  s.state = static_cast<shm::DaemonState>(segment.state.load(std::memory_order_acquire));
  s.generation = segment.generation;
  s.quantum_ns = segment.quantum_ns;
  // Minor-0 daemons left these words zero, which reads as "unknown" below.
  s.share_window_ns = segment.share_window_ns;
  s.lower_timeslice_us = segment.lower_timeslice_us.load(std::memory_order_relaxed);
  s.daemon_pid = segment.daemon_pid;
  s.ephemeral = (segment.flags & shm::Segment::kEphemeral) != 0;

  const shm::SpatialState* spatial = shm::spatial_state(segment);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    if (!gpu_in_use(segment, g)) continue;
    s.gpus.push_back(gpu_snapshot(segment.gpus[g], g));
    s.gpus.back().spatial = spatial != nullptr && ((spatial->spatial_gpus.load(kRelaxed) >> g) & 1u) != 0;
  }
  if (spatial != nullptr) {
    static constexpr const char* kStates[] = {"off", "running", "starting", "failed"};
    const uint32_t state = spatial->mps_state.load(kRelaxed);
    s.mps = state < 4 ? kStates[state] : "off";
    s.mps_starts = spatial->mps_starts.load(kRelaxed);
  }

  for (uint32_t i = 0; i < shm::kMaxTenants; ++i) {
    const shm::Tenant& t = segment.tenants[i];
    const uint32_t state = t.state.load(std::memory_order_acquire);
    if (state == shm::Tenant::kFree) continue;
    s.tenants.push_back(tenant_snapshot(t, i, state, s.gpus, s.abi_minor));
    if (spatial != nullptr) spatial_snapshot(s.tenants.back(), spatial->tenants[i], s.gpus);
  }

  for (const shm::ProcessSlot& slot : segment.processes) {
    if (slot.state.load(std::memory_order_acquire) != shm::ProcessSlot::kActive) continue;
    const uint32_t tenant = slot.tenant.load(kRelaxed);
    const pid_t pid = slot.pid.load(kRelaxed);
    const uint64_t pool = uint64_t{slot.host_pool_mib.load(kRelaxed)} << 20;
    for (TenantSnapshot& t : s.tenants) {
      if (t.index != tenant || pid <= 0) continue;
      t.pids.push_back(pid);
      t.host_pool_target += pool;
    }
  }
  for (TenantSnapshot& t : s.tenants) std::sort(t.pids.begin(), t.pids.end());
  return s;
}

const char* suspension_name(shm::Tenant::Preemption state) {
  switch (state) {
    case shm::Tenant::kRunning: return "running";
    case shm::Tenant::kSuspending: return "suspending";
    case shm::Tenant::kSuspended: return "suspended";
    case shm::Tenant::kResuming: return "resuming";
    case shm::Tenant::kSuspendFailed: return "failed";
    default: return "running";
  }
}

}  // namespace cuslice
