#include "metrics_exposition.h"

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

}  // namespace

std::string render_metrics(const SegmentSnapshot& s, const TenantWorkloads& workloads) {
  std::vector<MetricFamily> families;
  const auto family = [&families](const char* name, MetricType type, const char* help) -> MetricFamily& {
    families.push_back(MetricFamily{name, help, type, {}});
    return families.back();
  };
  // One family per tenant-GPU quantity; `value` returns nothing to leave a sample out.
  const auto per_tenant_gpu = [&](const char* name, MetricType type, const char* help,
                                  const std::function<std::optional<double>(const TenantGpuSnapshot&)>& value) {
    MetricFamily& f = family(name, type, help);
    for (const TenantSnapshot& t : s.tenants)
      for (const TenantGpuSnapshot& use : t.gpus)
        if (const auto v = value(use)) add_sample(f, tenant_gpu_labels(t, s.gpus[use.gpu], workloads), *v);
  };
  const auto per_tenant = [&](const char* name, const char* help,
                              const std::function<double(const TenantSnapshot&)>& value) {
    MetricFamily& f = family(name, MetricType::Gauge, help);
    for (const TenantSnapshot& t : s.tenants) add_sample(f, tenant_labels(t, workloads), value(t));
  };
  constexpr MetricType kGauge = MetricType::Gauge;
  constexpr MetricType kCounter = MetricType::Counter;

  per_tenant_gpu("cuslice_tenant_memory_used_bytes", kGauge, "GPU memory reserved by the tenant's processes.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.memory_used); });
  per_tenant_gpu("cuslice_tenant_memory_quota_bytes", kGauge,
                 "The tenant's memory quota on the GPU (absent: no quota, or a share of a card of unknown size).",
                 [](const TenantGpuSnapshot& u) -> std::optional<double> {
                   if (!u.memory_quota) return std::nullopt;
                   return static_cast<double>(*u.memory_quota);
                 });
  per_tenant_gpu("cuslice_tenant_gpu_seconds_total", kCounter, "GPU time the tenant's hooks reported.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.gpu_time_ns) / kNanosPerSecond; });
  per_tenant_gpu("cuslice_tenant_token_wait_seconds_total", kCounter,
                 "Time the tenant's threads spent blocked waiting for the GPU's token, summed over threads.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.wait_ns) / kNanosPerSecond; });
  per_tenant_gpu("cuslice_tenant_token_grants_total", kCounter, "Times the GPU's token was handed to the tenant.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.token_grants); });
  per_tenant_gpu("cuslice_tenant_oom_refusals_total", kCounter,
                 "Allocations refused with out-of-memory because of the tenant's quota.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.oom_refusals); });
  per_tenant_gpu("cuslice_tenant_achieved_share_ratio", kGauge,
                 "Share of the GPU's time the tenant used over the daemon's share window.",
                 [](const TenantGpuSnapshot& u) { return u.achieved_share_ppm / kPpm; });
  per_tenant_gpu("cuslice_tenant_token_held", kGauge, "1 while the tenant holds the GPU's token, else 0.",
                 [](const TenantGpuSnapshot& u) { return u.holds_token ? 1.0 : 0.0; });
  per_tenant_gpu("cuslice_tenant_over_quota_bytes", kGauge,
                 "What the driver says the tenant's processes hold beyond its quota and the watchdog's allowance.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.over_quota_bytes); });
  per_tenant_gpu("cuslice_tenant_watchdog_kills_total", kCounter,
                 "The tenant's processes the usage watchdog killed (on_violation: kill).",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.watchdog_kills); });
  per_tenant_gpu("cuslice_tenant_preemption_moved_bytes_total", kCounter,
                 "GPU memory the tenant's suspensions moved to host memory and its resumptions moved back.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.bytes_moved); });

  per_tenant("cuslice_tenant_processes", "Processes registered in the tenant.",
             [](const TenantSnapshot& t) { return static_cast<double>(t.pids.size()); });
  per_tenant("cuslice_tenant_share_ratio", "The tenant's configured share of each GPU under contention.",
             [](const TenantSnapshot& t) { return t.share_ppm / kPpm; });
  per_tenant("cuslice_tenant_limit_ratio", "The tenant's cap on each GPU's time (1: uncapped).",
             [](const TenantSnapshot& t) { return t.limit_ppm / kPpm; });
  per_tenant("cuslice_tenant_suspended",
             "1 while the tenant is suspended to host memory (or being suspended or resumed), 2 after a failed "
             "suspension or resumption, else 0.",
             [](const TenantSnapshot& t) {
               return t.suspension == shm::Tenant::kSuspendFailed ? 2.0 : t.suspension != shm::Tenant::kRunning ? 1.0 : 0.0;
             });
  const auto per_tenant_counter = [&](const char* name, const char* help,
                                      const std::function<double(const TenantSnapshot&)>& value) {
    MetricFamily& f = family(name, kCounter, help);
    for (const TenantSnapshot& t : s.tenants) add_sample(f, tenant_labels(t, workloads), value(t));
  };
  per_tenant_counter("cuslice_tenant_suspensions_total", "Times the tenant was suspended to host memory.",
                     [](const TenantSnapshot& t) { return static_cast<double>(t.suspensions); });
  per_tenant_counter("cuslice_tenant_suspended_seconds_total", "Time the tenant spent suspended.",
                     [](const TenantSnapshot& t) { return static_cast<double>(t.suspended_ns) / kNanosPerSecond; });
  per_tenant_counter("cuslice_tenant_suspend_seconds_total",
                     "Time the scheduler spent suspending the tenant (the driver's checkpoints).",
                     [](const TenantSnapshot& t) { return static_cast<double>(t.suspend_ns) / kNanosPerSecond; });
  per_tenant_counter("cuslice_tenant_resume_seconds_total",
                     "Time the scheduler spent resuming the tenant (the driver's restores).",
                     [](const TenantSnapshot& t) { return static_cast<double>(t.resume_ns) / kNanosPerSecond; });

  MetricFamily& handoffs = family("cuslice_gpu_token_handoffs_total", kCounter, "Times the GPU's token changed hands.");
  for (const GpuSnapshot& gpu : s.gpus) add_sample(handoffs, {{"gpu", gpu_label(gpu)}}, static_cast<double>(gpu.handoffs));
  MetricFamily& total = family("cuslice_gpu_memory_total_bytes", kGauge, "The GPU's memory, as reported by the hooks.");
  for (const GpuSnapshot& gpu : s.gpus)
    if (gpu.memory_total != 0) add_sample(total, {{"gpu", gpu_label(gpu)}}, static_cast<double>(gpu.memory_total));
  // One family at a time: `family` appends to a vector, so an earlier reference may move.
  MetricFamily& unhooked = family("cuslice_gpu_unhooked_processes", kGauge,
                                  "GPU processes the driver runs that no registered process accounts for (no hook).");
  for (const GpuSnapshot& gpu : s.gpus)
    add_sample(unhooked, {{"gpu", gpu_label(gpu)}}, static_cast<double>(gpu.unhooked_processes));
  MetricFamily& unhooked_bytes = family("cuslice_gpu_unhooked_memory_bytes", kGauge,
                                        "Memory the driver says processes without the hook hold.");
  for (const GpuSnapshot& gpu : s.gpus)
    add_sample(unhooked_bytes, {{"gpu", gpu_label(gpu)}}, static_cast<double>(gpu.unhooked_bytes));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace cuslice
