#include "metrics_exposition.h"

#include <fmt/format.h>

#include <functional>

namespace cuslice {
namespace {

// Label values may hold any UTF-8; these three characters must be escaped.
std::string escape_label(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string gpu_label(const GpuSnapshot& gpu) {
  return gpu.uuid ? *gpu.uuid : std::to_string(gpu.index);
}

class Writer {
 public:
  // Starts a metric family: HELP and TYPE come once, before its samples.
  void family(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    name_ = name;
  }
  void sample(const std::string& labels, double value) {
    fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name_, labels, value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  const char* name_ = "";
};

std::string workload_labels(const TenantSnapshot& t, const TenantWorkloads& workloads) {
  const auto it = workloads.find(t.name);
  if (it == workloads.end()) return "";
  std::string out;
  const auto add = [&out](const char* name, const std::string& value) {
    if (!value.empty()) out += fmt::format(",{}=\"{}\"", name, escape_label(value));
  };
  add("namespace", it->second.pod_namespace);
  add("pod", it->second.pod_name);
  add("container", it->second.container_name);
  return out;
}

std::string tenant_labels(const TenantSnapshot& t, const TenantWorkloads& workloads) {
  return fmt::format("tenant=\"{}\"{}", escape_label(t.name), workload_labels(t, workloads));
}

std::string tenant_gpu_labels(const TenantSnapshot& t, const GpuSnapshot& gpu, const TenantWorkloads& workloads) {
  return fmt::format("tenant=\"{}\",gpu=\"{}\"{}", escape_label(t.name), escape_label(gpu_label(gpu)),
                     workload_labels(t, workloads));
}

constexpr double kNanosPerSecond = 1e9;
constexpr double kPpm = 1e6;

}  // namespace

std::string render_metrics(const SegmentSnapshot& s, const TenantWorkloads& workloads) {
  Writer w;
  // One family per tenant-GPU quantity; `value` returns nothing to leave a sample out.
  const auto per_tenant_gpu = [&](const char* name, const char* type, const char* help,
                                  const std::function<std::optional<double>(const TenantGpuSnapshot&)>& value) {
    w.family(name, type, help);
    for (const TenantSnapshot& t : s.tenants)
      for (const TenantGpuSnapshot& use : t.gpus)
        if (const auto v = value(use)) w.sample(tenant_gpu_labels(t, s.gpus[use.gpu], workloads), *v);
  };
  const auto per_tenant = [&](const char* name, const char* type, const char* help,
                              const std::function<double(const TenantSnapshot&)>& value) {
    w.family(name, type, help);
    for (const TenantSnapshot& t : s.tenants) w.sample(tenant_labels(t, workloads), value(t));
  };

  per_tenant_gpu("cuslice_tenant_memory_used_bytes", "gauge", "GPU memory reserved by the tenant's processes.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.memory_used); });
  per_tenant_gpu("cuslice_tenant_memory_quota_bytes", "gauge",
                 "The tenant's memory quota on the GPU (absent: no quota, or a share of a card of unknown size).",
                 [](const TenantGpuSnapshot& u) -> std::optional<double> {
                   if (!u.memory_quota) return std::nullopt;
                   return static_cast<double>(*u.memory_quota);
                 });
  per_tenant_gpu("cuslice_tenant_gpu_seconds_total", "counter", "GPU time the tenant's hooks reported.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.gpu_time_ns) / kNanosPerSecond; });
  per_tenant_gpu("cuslice_tenant_token_wait_seconds_total", "counter",
                 "Time the tenant's threads spent blocked waiting for the GPU's token, summed over threads.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.wait_ns) / kNanosPerSecond; });
  per_tenant_gpu("cuslice_tenant_token_grants_total", "counter", "Times the GPU's token was handed to the tenant.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.token_grants); });
  per_tenant_gpu("cuslice_tenant_oom_refusals_total", "counter",
                 "Allocations refused with out-of-memory because of the tenant's quota.",
                 [](const TenantGpuSnapshot& u) { return static_cast<double>(u.oom_refusals); });
  per_tenant_gpu("cuslice_tenant_achieved_share_ratio", "gauge",
                 "Share of the GPU's time the tenant used over the daemon's share window.",
                 [](const TenantGpuSnapshot& u) { return u.achieved_share_ppm / kPpm; });
  per_tenant_gpu("cuslice_tenant_token_held", "gauge", "1 while the tenant holds the GPU's token, else 0.",
                 [](const TenantGpuSnapshot& u) { return u.holds_token ? 1.0 : 0.0; });

  per_tenant("cuslice_tenant_processes", "gauge", "Processes registered in the tenant.",
             [](const TenantSnapshot& t) { return static_cast<double>(t.pids.size()); });
  per_tenant("cuslice_tenant_share_ratio", "gauge", "The tenant's configured share of each GPU under contention.",
             [](const TenantSnapshot& t) { return t.share_ppm / kPpm; });
  per_tenant("cuslice_tenant_limit_ratio", "gauge", "The tenant's cap on each GPU's time (1: uncapped).",
             [](const TenantSnapshot& t) { return t.limit_ppm / kPpm; });

  w.family("cuslice_gpu_token_handoffs_total", "counter", "Times the GPU's token changed hands.");
  for (const GpuSnapshot& gpu : s.gpus)
    w.sample(fmt::format("gpu=\"{}\"", escape_label(gpu_label(gpu))), static_cast<double>(gpu.handoffs));
  w.family("cuslice_gpu_memory_total_bytes", "gauge", "The GPU's memory, as reported by the hooks.");
  for (const GpuSnapshot& gpu : s.gpus)
    if (gpu.memory_total != 0)
      w.sample(fmt::format("gpu=\"{}\"", escape_label(gpu_label(gpu))), static_cast<double>(gpu.memory_total));
  return w.take();
}

}  // namespace cuslice
