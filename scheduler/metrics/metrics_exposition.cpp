// render_metrics (metrics_exposition.h): one prometheus-cpp family per quantity, by tenant and
// GPU, by tenant, and by GPU, in a fixed order so that the same snapshot gives the same text.
#include "scheduler/metrics/metrics_exposition.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <functional>

namespace cuslice {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

std::string gpu_label(const GpuSnapshot& gpu) {
  return gpu.uuid ? *gpu.uuid : std::to_string(gpu.index);
}

// tenant, then (where known) namespace, pod and container.
Labels tenant_labels(const TenantSnapshot& t, const TenantWorkloads& workloads) {
  Labels labels{{"tenant", t.name}};
  const auto it = workloads.find(t.name);
  if (it == workloads.end()) return labels;
  const auto add = [&labels](const char* name, const std::string& value) {
    if (!value.empty()) labels.push_back({name, value});
  };
  add("namespace", it->second.pod_namespace);
  add("pod", it->second.pod_name);
  add("container", it->second.container_name);
  return labels;
}

Labels tenant_gpu_labels(const TenantSnapshot& t, const GpuSnapshot& gpu, const TenantWorkloads& workloads) {
  Labels labels = tenant_labels(t, workloads);
  labels.insert(labels.begin() + 1, {"gpu", gpu_label(gpu)});
  return labels;
}

void add_sample(MetricFamily& family, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (family.type == MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  family.metric.push_back(std::move(m));
}

constexpr double kNanosPerSecond = 1e9;
constexpr double kPpm = 1e6;
constexpr MetricType kGauge = MetricType::Gauge;
constexpr MetricType kCounter = MetricType::Counter;

// The families being built from one snapshot, and the ways a family's samples are made.
class Families {
 public:
  Families(const SegmentSnapshot& s, const TenantWorkloads& workloads) : s_(s), workloads_(workloads) {}

  // One family at a time: the vector may move an earlier family when it grows.
  MetricFamily& family(const char* name, MetricType type, const char* help) {
    families_.push_back(MetricFamily{name, help, type, {}});
    return families_.back();
  }
  // One family per tenant-GPU quantity; `value` returns nothing to leave a sample out.
  void per_tenant_gpu(const char* name, MetricType type, const char* help,
                      const std::function<std::optional<double>(const TenantGpuSnapshot&)>& value) {
    MetricFamily& f = family(name, type, help);
    // A tenant is shown on the GPUs it may use or holds something on, not on every GPU.
    for (const TenantSnapshot& t : s_.tenants) {
      for (const TenantGpuSnapshot& use : t.gpus) {
        if (!use.shown()) continue;
        if (const auto v = value(use)) add_sample(f, tenant_gpu_labels(t, s_.gpus[use.gpu], workloads_), *v);
      }
    }
  }
  void per_tenant(const char* name, MetricType type, const char* help,
                  const std::function<double(const TenantSnapshot&)>& value) {
    MetricFamily& f = family(name, type, help);
    for (const TenantSnapshot& t : s_.tenants) add_sample(f, tenant_labels(t, workloads_), value(t));
  }
  // `value` returns nothing to leave a GPU out.
  void per_gpu(const char* name, MetricType type, const char* help,
               const std::function<std::optional<double>(const GpuSnapshot&)>& value) {
    MetricFamily& f = family(name, type, help);
    for (const GpuSnapshot& gpu : s_.gpus)
      if (const auto v = value(gpu)) add_sample(f, {{"gpu", gpu_label(gpu)}}, *v);
  }
  std::string text() const { return prometheus::TextSerializer().Serialize(families_); }

 private:
  const SegmentSnapshot& s_;
  const TenantWorkloads& workloads_;
  std::vector<MetricFamily> families_;
};

void tenant_gpu_families(Families& f) {
  f.per_tenant_gpu("cuslice_tenant_memory_used_bytes", kGauge, "GPU memory reserved by the tenant's processes.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.memory_used); });
  f.per_tenant_gpu("cuslice_tenant_memory_quota_bytes", kGauge,
                   "The tenant's memory quota on the GPU (absent: no quota, or a share of a card of unknown size).",
                   [](const TenantGpuSnapshot& u) -> std::optional<double> {
                     if (!u.memory_quota) return std::nullopt;
                     return static_cast<double>(*u.memory_quota);
                   });
  f.per_tenant_gpu("cuslice_tenant_gpu_seconds_total", kCounter, "GPU time the tenant's hooks reported.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.gpu_time_ns) / kNanosPerSecond; });
  f.per_tenant_gpu("cuslice_tenant_token_wait_seconds_total", kCounter,
                   "Time the tenant's threads spent blocked waiting for the GPU's token, summed over threads.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.wait_ns) / kNanosPerSecond; });
  f.per_tenant_gpu("cuslice_tenant_token_grants_total", kCounter, "Times the GPU's token was handed to the tenant.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.token_grants); });
  f.per_tenant_gpu("cuslice_tenant_oom_refusals_total", kCounter,
                   "Allocations refused with out-of-memory because of the tenant's quota.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.oom_refusals); });
  f.per_tenant_gpu("cuslice_tenant_gpu_share_ratio", kGauge,
                   "The tenant's configured share of the GPU under contention (0: the configuration does not let it "
                   "use the GPU).",
                   [](const TenantGpuSnapshot& u) { return u.share_ppm / kPpm; });
  f.per_tenant_gpu("cuslice_tenant_achieved_share_ratio", kGauge,
                   "Share of the GPU's time the tenant used over the daemon's share window.",
                   [](const TenantGpuSnapshot& u) { return u.achieved_share_ppm / kPpm; });
  f.per_tenant_gpu("cuslice_tenant_token_held", kGauge, "1 while the tenant holds the GPU's token, else 0.",
                   [](const TenantGpuSnapshot& u) { return u.holds_token ? 1.0 : 0.0; });
  f.per_tenant_gpu("cuslice_tenant_over_quota_bytes", kGauge,
                   "What the driver says the tenant's processes hold beyond its quota and the watchdog's allowance.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.over_quota_bytes); });
  f.per_tenant_gpu("cuslice_tenant_watchdog_kills_total", kCounter,
                   "The tenant's processes the usage watchdog killed (on_violation: kill).",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.watchdog_kills); });
  f.per_tenant_gpu("cuslice_tenant_preemption_moved_bytes_total", kCounter,
                   "GPU memory the tenant's suspensions moved to host memory and its resumptions moved back.",
                   [](const TenantGpuSnapshot& u) { return static_cast<double>(u.bytes_moved); });
  f.per_tenant_gpu("cuslice_tenant_spatial", kGauge,
                   "1 where the tenant runs side by side with the GPU's other spatial tenants (MPS), else 0.",
                   [](const TenantGpuSnapshot& u) { return u.spatial ? 1.0 : 0.0; });
}

void tenant_families(Families& f) {
  f.per_tenant("cuslice_tenant_processes", kGauge, "Processes registered in the tenant.",
               [](const TenantSnapshot& t) { return static_cast<double>(t.pids.size()); });
  f.per_tenant("cuslice_tenant_share_ratio", kGauge, "The tenant's configured share of each GPU under contention.",
               [](const TenantSnapshot& t) { return t.share_ppm / kPpm; });
  f.per_tenant("cuslice_tenant_limit_ratio", kGauge, "The tenant's cap on each GPU's time (1: uncapped).",
               [](const TenantSnapshot& t) { return t.limit_ppm / kPpm; });
  f.per_tenant("cuslice_tenant_sm_ratio", kGauge,
               "The share of a spatial GPU's SMs the tenant's kernels may use (MPS's active thread percentage).",
               [](const TenantSnapshot& t) { return t.sm_percent / 100.0; });
  f.per_tenant("cuslice_tenant_suspended", kGauge,
               "1 while the tenant is suspended to host memory (or being suspended or resumed), 2 after a failed "
               "suspension or resumption, else 0.",
               [](const TenantSnapshot& t) {
                 return t.suspension == shm::Tenant::kSuspendFailed ? 2.0
                        : t.suspension != shm::Tenant::kRunning     ? 1.0
                                                                    : 0.0;
               });
  f.per_tenant("cuslice_tenant_suspensions_total", kCounter, "Times the tenant was suspended to host memory.",
               [](const TenantSnapshot& t) { return static_cast<double>(t.suspensions); });
  f.per_tenant("cuslice_tenant_suspended_seconds_total", kCounter, "Time the tenant spent suspended.",
               [](const TenantSnapshot& t) { return static_cast<double>(t.suspended_ns) / kNanosPerSecond; });
  f.per_tenant("cuslice_tenant_suspend_seconds_total", kCounter,
               "Time the scheduler spent suspending the tenant (the driver's checkpoints).",
               [](const TenantSnapshot& t) { return static_cast<double>(t.suspend_ns) / kNanosPerSecond; });
  f.per_tenant("cuslice_tenant_resume_seconds_total", kCounter,
               "Time the scheduler spent resuming the tenant (the driver's restores).",
               [](const TenantSnapshot& t) { return static_cast<double>(t.resume_ns) / kNanosPerSecond; });
}

void preemption_families(Families& f, const TenantPreemptionFigures& figures) {
  const auto of = [&figures](const TenantSnapshot& t) {
    const auto it = figures.find(t.name);
    return it != figures.end() ? it->second : PreemptionFigures{};
  };
  f.per_tenant("cuslice_tenant_last_suspension_fast", kGauge,
               "1 when the tenant's last suspension went the fast way (its hooks moved what was missing), 0 when "
               "the driver's checkpoint moved it, or when it was never suspended.",
               [&](const TenantSnapshot& t) { return of(t).fast ? 1.0 : 0.0; });
  f.per_tenant("cuslice_tenant_last_suspension_moved_bytes", kGauge,
               "GPU memory the tenant's last suspension took off the card.",
               [&](const TenantSnapshot& t) { return static_cast<double>(of(t).moved_out); });
  f.per_tenant("cuslice_tenant_host_pool_bytes", kGauge,
               "Pinned host memory the tenant's processes prepared for the fast way.",
               [&](const TenantSnapshot& t) { return static_cast<double>(of(t).host_pool); });
  f.per_tenant("cuslice_tenant_last_time_to_room_seconds", kGauge,
               "How long the tenant's last allocation that needed room (suspensions of others) waited for it.",
               [&](const TenantSnapshot& t) { return of(t).time_to_room; });
}

void gpu_families(Families& f) {
  f.per_gpu("cuslice_gpu_token_handoffs_total", kCounter, "Times the GPU's token changed hands.",
            [](const GpuSnapshot& g) { return static_cast<double>(g.handoffs); });
  f.per_gpu("cuslice_gpu_spatial", kGauge, "1 when the GPU's tenants run side by side through MPS, else 0.",
            [](const GpuSnapshot& g) { return g.spatial ? 1.0 : 0.0; });
  f.per_gpu("cuslice_gpu_memory_total_bytes", kGauge, "The GPU's memory, as reported by the hooks.",
            [](const GpuSnapshot& g) -> std::optional<double> {
              if (g.memory_total == 0) return std::nullopt;
              return static_cast<double>(g.memory_total);
            });
  f.per_gpu("cuslice_gpu_unhooked_processes", kGauge,
            "GPU processes the driver runs that no registered process accounts for (no hook).",
            [](const GpuSnapshot& g) { return static_cast<double>(g.unhooked_processes); });
  f.per_gpu("cuslice_gpu_unhooked_memory_bytes", kGauge, "Memory the driver says processes without the hook hold.",
            [](const GpuSnapshot& g) { return static_cast<double>(g.unhooked_bytes); });
}

}  // namespace

std::string render_metrics(const SegmentSnapshot& s, const TenantWorkloads& workloads,
                           const TenantPreemptionFigures& preemption) {
  Families families(s, workloads);
  tenant_gpu_families(families);
  tenant_families(families);
  preemption_families(families, preemption);
  gpu_families(families);
  MetricFamily& mps = families.family("cuslice_mps_control_up", kGauge,
                                      "1 while the MPS control daemon of the spatial GPUs runs, 0 while it is being "
                                      "started or cannot be; absent without spatial GPUs.");
  if (s.mps != "off") add_sample(mps, {}, s.mps == "running" ? 1.0 : 0.0);
  MetricFamily& starts = families.family("cuslice_mps_control_starts_total", kCounter,
                                         "Times the scheduler started the MPS control daemon.");
  if (s.mps != "off") add_sample(starts, {}, static_cast<double>(s.mps_starts));
  return families.text();
}

}  // namespace cuslice
