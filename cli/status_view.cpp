#include "cli/status_view.h"

#include <fmt/format.h>

#include <cmath>

namespace cuslice::cli {
namespace {

using nlohmann::json;

constexpr double kPpm = 1e6;
constexpr double kNanosPerSecond = 1e9;

const char* state_name(shm::DaemonState state) {
  switch (state) {
    case shm::DaemonState::kStarting: return "starting";
    case shm::DaemonState::kRunning: return "running";
    case shm::DaemonState::kStopped: return "stopped";
  }
  return "unknown";
}

template <typename T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

std::string tenant_name(const SegmentSnapshot& s, std::optional<uint32_t> index) {
  if (!index) return {};
  for (const TenantSnapshot& t : s.tenants)
    if (t.index == *index) return t.name;
  return fmt::format("#{}", *index);
}

std::string percent(uint32_t ppm) { return fmt::format("{:g}%", std::round(ppm / 1e3) / 10.0); }

std::string quota_text(const TenantSnapshot& t, const TenantGpuSnapshot& use) {
  if (use.memory_quota) return format_bytes(*use.memory_quota);
  if (t.memory_quota_ppm) return percent(*t.memory_quota_ppm);  // card size not known yet
  return "none";
}

// The tenant's Kubernetes workload, or null.
json workload_json(const DaemonView& d, const std::string& tenant) {
  auto it = d.workloads.find(tenant);
  if (it == d.workloads.end()) return nullptr;
  return {{"namespace", it->second.pod_namespace}, {"pod", it->second.pod_name},
          {"container", it->second.container_name}};
}

std::string pids_text(const std::vector<pid_t>& pids) {
  if (pids.empty()) return "-";
  std::string text;
  for (pid_t pid : pids) text += (text.empty() ? "" : ",") + std::to_string(pid);
  return text;
}

// status_table's parts, each appending its lines to `out`.
void add_line(std::string& out, const std::string& text) { out += text + "\n"; }

void daemon_line(std::string& out, const SegmentSnapshot& s, const DaemonView& d) {
  std::string source = s.ephemeral ? "tenants from cuslice run"
                       : d.config_path ? "config " + *d.config_path
                                       : "config file";
  add_line(out, fmt::format(
                    "cuslice-scheduler {}  pid {}  {}  socket {}{}  shm {}  quantum {:g}ms  lower-priority slice {}",
                    state_name(s.state), s.daemon_pid, source, d.socket_path, d.reachable ? "" : " (not answering)",
                    d.shm_name, static_cast<double>(s.quantum_ns) / 1e6,
                    s.lower_timeslice_us != 0 ? fmt::format("{}us", s.lower_timeslice_us) : std::string("off")));
}

// What the usage watchdog found needs no tenant: a process without the hook is in none.
void unhooked_without_tenants(std::string& out, const SegmentSnapshot& s) {
  for (const GpuSnapshot& g : s.gpus)
    if (g.unhooked_processes != 0)
      add_line(out, fmt::format("! GPU {}: {} process(es) without the hook hold {} (in no tenant)", g.index,
                                g.unhooked_processes, format_bytes(g.unhooked_bytes)));
}

void tenant_rows(std::string& out, const SegmentSnapshot& s, const DaemonView& d) {
  constexpr const char* kTenantRow = "  {:<16} {:<7} {:>6} {:>6} {:>5} {:>8}  {}";
  add_line(out, "");
  add_line(out, fmt::format(kTenantRow, "TENANT", "PRIO", "SHARE", "LIMIT", "PROCS", "QUOTA", "PIDS"));
  for (const TenantSnapshot& t : s.tenants) {
    const std::string quota = t.memory_quota_bytes ? format_bytes(*t.memory_quota_bytes)
                              : t.memory_quota_ppm ? percent(*t.memory_quota_ppm)
                                                   : "none";
    add_line(out, fmt::format(kTenantRow, t.name + (t.retired ? " (retired)" : ""), priority_name(t.priority),
                              percent(t.share_ppm), percent(t.limit_ppm), t.pids.size(), quota, pids_text(t.pids)));
    if (auto w = d.workloads.find(t.name); w != d.workloads.end())
      add_line(out, fmt::format("    pod {}/{}, container {}", w->second.pod_namespace, w->second.pod_name,
                                w->second.container_name.empty() ? "?" : w->second.container_name));
  }
}

const DaemonView::PreemptionFacts& facts(const DaemonView& d, const std::string& name) {
  static const DaemonView::PreemptionFacts kNone;
  const auto it = d.preemption_facts.find(name);
  return it != d.preemption_facts.end() ? it->second : kNone;
}

// The host pool as it is made: "1.5G/4.0G" (pinned of what its processes are to pin), or what
// is pinned where nothing more is to come.
std::string pool_progress(uint64_t pinned, uint64_t target) {
  if (target == 0 || pinned >= target) return format_bytes(pinned);
  return format_bytes(pinned) + "/" + format_bytes(target);
}

// Memory preemption: the preemptible tenants, and any tenant the daemon has something to say
// about (a request of its refused, a failure).
void preemption_rows(std::string& out, const SegmentSnapshot& s, const DaemonView& d) {
  std::vector<const TenantSnapshot*> preempt;
  for (const TenantSnapshot& t : s.tenants)
    if (t.preemptible || t.suspension != shm::Tenant::kRunning || d.preemption_reasons.count(t.name)) preempt.push_back(&t);
  if (preempt.empty()) return;
  add_line(out, "");
  add_line(out, fmt::format("  {:<16} {:<10} {:>11} {:>9} {:>10} {:<10} {:>10}  {}", "PREEMPTION", "STATE",
                            "SUSPENSIONS", "SUSPENDED", "MOVED", "LAST", "HOST POOL", "WHY"));
  for (const TenantSnapshot* t : preempt) {
    uint64_t moved = 0;
    for (const TenantGpuSnapshot& use : t->gpus) moved += use.bytes_moved;
    const auto why = d.preemption_reasons.find(t->name);
    const DaemonView::PreemptionFacts& f = facts(d, t->name);
    add_line(out, fmt::format("  {:<16} {:<10} {:>11} {:>9} {:>10} {:<10} {:>10}  {}", t->name,
                              suspension_name(t->suspension), t->suspensions,
                              format_seconds(static_cast<double>(t->suspended_ns) / kNanosPerSecond),
                              format_bytes(moved), f.path.empty() ? "-" : f.path, pool_progress(f.host_pool, t->host_pool_target),
                              why != d.preemption_reasons.end() ? why->second : "-"));
  }
}

// GPU `k`: its token, each tenant's use of it, and what the usage watchdog found on it.
void gpu_rows(std::string& out, const SegmentSnapshot& s, size_t k) {
  constexpr const char* kGpuRow = "  {:<16} {:>21} {:>9} {:>9} {:>9} {:>8} {:>5} {}";
  const GpuSnapshot& g = s.gpus[k];
  const std::string holder = g.group_holds ? "spatial group" : tenant_name(s, g.holder);
  add_line(out, "");
  add_line(out, fmt::format("GPU {}{}{}  {}token: {}  handoffs: {}", g.index, g.uuid ? "  " + *g.uuid : "",
                            g.memory_total ? "  " + format_bytes(g.memory_total) : "",
                            g.spatial ? "spatial (MPS " + s.mps + ")  " : "", holder.empty() ? "-" : holder,
                            g.handoffs));
  add_line(out, fmt::format(kGpuRow, "TENANT", "MEMORY USED / QUOTA", "SHARE", "ACHIEVED", "GPU TIME", "WAITED", "OOM",
                            "GRANTS"));
  // Each tenant on the GPUs it may use, or holds something on all the same.
  for (const TenantSnapshot& t : s.tenants) {
    const TenantGpuSnapshot& use = t.gpus[k];
    if (!use.shown()) continue;
    const std::string side = use.spatial ? fmt::format(" [sm {}%]", t.sm_percent) : "";
    add_line(out, fmt::format(kGpuRow, (use.holds_token ? "* " : "  ") + t.name + side,
                              format_bytes(use.memory_used) + " / " + quota_text(t, use), percent(use.share_ppm),
                              percent(use.achieved_share_ppm),
                              format_seconds(static_cast<double>(use.gpu_time_ns) / kNanosPerSecond),
                              format_seconds(static_cast<double>(use.wait_ns) / kNanosPerSecond), use.oom_refusals,
                              use.token_grants));
  }
  // What the usage watchdog found: the driver's count, which a process without the hook
  // cannot hide from.
  if (g.unhooked_processes != 0)
    add_line(out, fmt::format("  ! {} process(es) without the hook hold {} on this GPU (in no tenant)",
                              g.unhooked_processes, format_bytes(g.unhooked_bytes)));
  for (const TenantSnapshot& t : s.tenants) {
    const TenantGpuSnapshot& use = t.gpus[k];
    if (use.over_quota_bytes != 0)
      add_line(out, fmt::format("  ! {} holds {} beyond its quota by the driver's count", t.name,
                                format_bytes(use.over_quota_bytes)));
    if (use.watchdog_kills != 0)
      add_line(out, fmt::format("  ! {}: {} process(es) killed for exceeding the quota", t.name, use.watchdog_kills));
  }
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  const int decimals = value < 10 ? 2 : value < 100 ? 1 : 0;
  return fmt::format("{:.{}f} {}", value, decimals, kUnits[unit]);
}

std::string format_seconds(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto whole = static_cast<uint64_t>(seconds);
  if (whole < 3600) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02}m", whole / 3600, whole / 60 % 60);
}

namespace {

// GPU `k` and the tenants on it (those that may use it or hold something on it), for --json.
json gpu_json(const SegmentSnapshot& s, size_t k) {
  const GpuSnapshot& g = s.gpus[k];
  json rows = json::array();
  for (const TenantSnapshot& t : s.tenants) {
    const TenantGpuSnapshot& use = t.gpus[k];
    if (!use.shown()) continue;
    rows.push_back({
        {"name", t.name},
        {"memory_used_bytes", use.memory_used},
        {"memory_quota_bytes", or_null(use.memory_quota)},
        {"share", use.share_ppm / kPpm},
        {"allowed", use.allowed},
        {"achieved_share", use.achieved_share_ppm / kPpm},
        {"gpu_seconds", static_cast<double>(use.gpu_time_ns) / kNanosPerSecond},
        {"token_wait_seconds", static_cast<double>(use.wait_ns) / kNanosPerSecond},
        {"token_grants", use.token_grants},
        {"oom_refusals", use.oom_refusals},
        {"holds_token", use.holds_token},
        {"over_quota_bytes", use.over_quota_bytes},
        {"watchdog_kills", use.watchdog_kills},
        {"preemption_moved_bytes", use.bytes_moved},
        {"spatial", use.spatial},
        {"sm_fraction", use.spatial ? json(t.sm_percent / 100.0) : json(nullptr)},
    });
  }
  const std::string holder = g.group_holds ? "spatial group" : tenant_name(s, g.holder);
  return {
      {"index", g.index},
      {"uuid", or_null(g.uuid)},
      {"memory_total_bytes", g.memory_total != 0 ? json(g.memory_total) : json(nullptr)},
      {"token_holder", holder.empty() ? json(nullptr) : json(holder)},
      {"token_handoffs", g.handoffs},
      {"mode", g.spatial ? "spatial" : "time-sliced"},
      {"unhooked_processes", g.unhooked_processes},
      {"unhooked_memory_bytes", g.unhooked_bytes},
      {"tenants", std::move(rows)},
  };
}

}  // namespace

json status_json(const SegmentSnapshot& s, const DaemonView& d) {
  json daemon = {
      {"reachable", d.reachable},
      {"state", state_name(s.state)},
      {"pid", s.daemon_pid != 0 ? json(s.daemon_pid) : json(nullptr)},
      {"mode", s.ephemeral ? "ephemeral" : "config"},
      {"config_path", or_null(d.config_path)},
      {"socket", d.socket_path},
      {"shm_name", d.shm_name},
      {"abi", fmt::format("{}.{}", s.abi_major, s.abi_minor)},
      {"generation", s.generation},
      {"quantum_seconds", static_cast<double>(s.quantum_ns) / kNanosPerSecond},
      // null: off (or a scheduler too old to say).
      {"lower_priority_timeslice_seconds",
       s.lower_timeslice_us != 0 ? json(static_cast<double>(s.lower_timeslice_us) / 1e6) : json(nullptr)},
      {"share_window_seconds",
       s.share_window_ns != 0 ? json(static_cast<double>(s.share_window_ns) / kNanosPerSecond) : json(nullptr)},
      {"mps", {{"state", s.mps}, {"starts", s.mps_starts}}},
  };

  json tenants = json::array();
  for (const TenantSnapshot& t : s.tenants) {
    tenants.push_back({
        {"name", t.name},
        {"state", t.retired ? "retired" : "active"},
        {"priority", priority_name(t.priority)},
        {"share", t.share_ppm / kPpm},
        {"limit", t.limit_ppm / kPpm},
        {"memory_quota_bytes", or_null(t.memory_quota_bytes)},
        {"memory_quota_fraction", t.memory_quota_ppm ? json(*t.memory_quota_ppm / kPpm) : json(nullptr)},
        {"pids", t.pids},
        {"workload", workload_json(d, t.name)},
        {"preemptible", t.preemptible},
        {"suspension",
         {{"state", suspension_name(t.suspension)},
          {"reason", d.preemption_reasons.count(t.name) ? json(d.preemption_reasons.at(t.name)) : json(nullptr)},
          {"suspensions", t.suspensions},
          {"suspended_seconds", static_cast<double>(t.suspended_ns) / kNanosPerSecond},
          {"suspend_seconds", static_cast<double>(t.suspend_ns) / kNanosPerSecond},
          {"resume_seconds", static_cast<double>(t.resume_ns) / kNanosPerSecond},
          {"path", facts(d, t.name).path},
          {"moved_out_bytes", facts(d, t.name).moved_out},
          {"time_to_room_seconds", facts(d, t.name).time_to_room}}},
        {"host_pool_bytes", facts(d, t.name).host_pool},
        {"host_pool_target_bytes", t.host_pool_target},
        {"movable_bytes", facts(d, t.name).movable},
    });
  }

  json gpus = json::array();
  for (size_t k = 0; k < s.gpus.size(); ++k) gpus.push_back(gpu_json(s, k));
  return {{"schema_version", kStatusSchemaVersion},
          {"daemon", std::move(daemon)},
          {"tenants", std::move(tenants)},
          {"gpus", std::move(gpus)}};
}

std::string status_table(const SegmentSnapshot& s, const DaemonView& d) {
  std::string out;
  daemon_line(out, s, d);
  if (s.tenants.empty()) {
    add_line(out, "no tenants yet");
    unhooked_without_tenants(out, s);
    return out;
  }
  tenant_rows(out, s, d);
  preemption_rows(out, s, d);
  if (s.gpus.empty()) {
    add_line(out, "");
    add_line(out, "no GPU in use yet");
    return out;
  }
  for (size_t k = 0; k < s.gpus.size(); ++k) gpu_rows(out, s, k);
  const std::string window =
      s.share_window_ns != 0 ? fmt::format("last {:g}s", static_cast<double>(s.share_window_ns) / 1e9) : "window";
  add_line(out, "");
  add_line(out, fmt::format("* holds the token.  ACHIEVED: share of the GPU's time used over the {}.", window));
  return out;
}

}  // namespace cuslice::cli
