#include "scheduler/tenants/plugin_tenants.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>

#include "protocol/ppm.h"

namespace cuslice {
namespace {

constexpr size_t kMinKey = 16;

template <size_t N>
std::string text(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

// Every string field NUL-terminated and zero after its end, so that records compare as bytes.
wire::PluginTenant sanitized(const wire::PluginTenant& in) {
  wire::PluginTenant out = in;
  const auto clean = [](auto& field) {
    const size_t n = strnlen(field, sizeof field - 1);
    std::memset(field + n, 0, sizeof field - n);
  };
  clean(out.name);
  clean(out.key);
  clean(out.gpu_uuid);
  clean(out.pod_namespace);
  clean(out.pod_name);
  clean(out.container_name);
  return out;
}

bool valid_key(std::string_view key) {
  if (key.size() < kMinKey) return false;
  for (char c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

// Compares without stopping at the first difference, so the time taken says nothing of the key.
bool same_key(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool is_pod_component(std::string_view c) {
  // "pod<uid>" (cgroupfs driver) or "kubepods-<qos>-pod<uid>.slice" (systemd driver).
  size_t at = c.find("pod");
  while (at != std::string_view::npos) {
    std::string_view rest = c.substr(at + 3);
    if (rest.size() >= 36) {
      size_t hex = 0, seps = 0;
      for (size_t i = 0; i < 36; ++i) {
        const char ch = rest[i];
        if (std::isxdigit(static_cast<unsigned char>(ch))) ++hex;
        else if (ch == '-' || ch == '_') ++seps;
      }
      if (hex == 32 && seps == 4) return true;
    }
    at = c.find("pod", at + 1);
  }
  return false;
}

// The GPUs a tenant is on (socket_protocol.h, PluginTenant::gpu_mask).
uint32_t gpus_of(const wire::PluginTenant& t) { return t.gpu_mask != 0 ? t.gpu_mask : 1u << t.gpu; }

bool under(std::string_view path, std::string_view root) {
  if (path.substr(0, root.size()) != root) return false;
  return path.size() == root.size() || root.back() == '/' || path[root.size()] == '/';
}

}  // namespace

std::string pod_cgroup(std::string_view cgroup) {
  size_t start = 0;
  while (start < cgroup.size()) {
    const size_t slash = cgroup.find('/', start + 1);
    const size_t end = slash == std::string_view::npos ? cgroup.size() : slash;
    std::string_view component = cgroup.substr(start, end - start);
    if (!component.empty() && component[0] == '/') component.remove_prefix(1);
    if (is_pod_component(component)) return std::string(cgroup.substr(0, end));
    start = end;
  }
  return std::string(cgroup);
}

namespace {

// Why `spec`, named `name`, is not a tenant the plugin may apply beside the file's, judged
// alone; empty when it may.
std::string spec_problem(const wire::PluginTenant& spec, const std::string& name, const Config& file) {
  if (!valid_tenant_name(name))
    return fmt::format("bad tenant name `{}`: 1 to {} characters of letters, digits, '-', '_' or '.'", name,
                       kMaxTenantNameLength);
  if (file.find_tenant(name) >= 0) return fmt::format("tenant `{}` is the configuration file's", name);
  if (!valid_key(text(spec.key)))
    return fmt::format("tenant `{}`: the credential must be {} to 63 letters, digits, '-' or '_'", name, kMinKey);
  if (spec.gpu >= shm::kMaxGpus)
    return fmt::format("tenant `{}`: GPU {} is beyond the {} the scheduler holds", name, spec.gpu, shm::kMaxGpus);
  if (spec.gpu_mask >> shm::kMaxGpus || (spec.gpu_mask != 0 && !((spec.gpu_mask >> spec.gpu) & 1u)))
    return fmt::format("tenant `{}`: GPU mask {:#x} is beyond the {} GPUs the scheduler holds, or leaves out "
                       "its GPU {}",
                       name, spec.gpu_mask, shm::kMaxGpus, spec.gpu);
  if (spec.memory_bytes == 0) return fmt::format("tenant `{}`: no memory quota", name);
  if (spec.priority > 2) return fmt::format("tenant `{}`: bad priority {}", name, spec.priority);
  if (spec.share_ppm > kPpmWhole || spec.limit_ppm == 0 || spec.limit_ppm > kPpmWhole ||
      spec.limit_ppm < spec.share_ppm)
    return fmt::format("tenant `{}`: share {} and limit {} (millionths) are not 0 <= share <= limit <= 1000000", name,
                       spec.share_ppm, spec.limit_ppm);
  return "";
}

}  // namespace

PluginOutcome PluginTenants::apply(const wire::PluginTenant& raw, const Config& file) {
  const wire::PluginTenant spec = sanitized(raw);
  const std::string name = text(spec.name);
  PluginOutcome out;
  out.message = spec_problem(spec, name, file);
  if (!out.message.empty()) return out;
  if (out.message = over_gpu(spec, name, file); !out.message.empty()) return out;
  auto it = tenants_.find(name);
  return it == tenants_.end() ? add(spec, name, file) : update(it->second, spec, name);
}

PluginOutcome PluginTenants::add(const wire::PluginTenant& spec, const std::string& name, const Config& file) {
  PluginOutcome out;
  if (file.tenants.size() + tenants_.size() >= kMaxConfigTenants) {
    out.message = fmt::format("already {} tenants, the most the scheduler holds", kMaxConfigTenants);
    return out;
  }
  tenants_.emplace(name, Record{spec, std::nullopt});
  out.ok = out.changed = true;
  out.message = spec.share_ppm != 0
                    ? fmt::format("added tenant `{}`: {} bytes on GPU {}, share {:g}%", name, spec.memory_bytes,
                                  spec.gpu, ppm_to_percent(spec.share_ppm))
                    : fmt::format("added tenant `{}`: {} bytes on GPU {}, a part of what the GPU's shares leave",
                                  name, spec.memory_bytes, spec.gpu);
  return out;
}

PluginOutcome PluginTenants::update(Record& record, const wire::PluginTenant& spec, const std::string& name) {
  PluginOutcome out;
  wire::PluginTenant& have = record.spec;
  if (!same_key(text(have.key), text(spec.key)) || have.gpu != spec.gpu || gpus_of(have) != gpus_of(spec) ||
      have.memory_bytes != spec.memory_bytes) {
    out.message = fmt::format("tenant `{}` exists with another credential, GPUs or memory quota (those are fixed)", name);
    return out;
  }
  out.ok = true;
  out.changed = std::memcmp(&have, &spec, sizeof spec) != 0;
  have = spec;
  out.message = out.changed ? fmt::format("updated tenant `{}`", name) : fmt::format("tenant `{}` unchanged", name);
  return out;
}

PluginOutcome PluginTenants::remove(std::string_view name) {
  PluginOutcome out;
  out.ok = true;
  out.changed = tenants_.erase(std::string(name)) > 0;
  out.message = out.changed ? fmt::format("removed tenant `{}`", name) : fmt::format("no tenant `{}`", name);
  return out;
}

PluginJoin PluginTenants::check_join(std::string_view requested, const std::string& cgroup) const {
  PluginJoin join;
  const size_t colon = requested.find(wire::kTenantKeySeparator);
  join.tenant = std::string(requested.substr(0, colon));
  const std::string_view key = colon == std::string_view::npos ? std::string_view{} : requested.substr(colon + 1);
  auto it = tenants_.find(join.tenant);
  if (it == tenants_.end()) {
    if (colon == std::string_view::npos) return join;  // a file tenant's name, or none: not ours
    join.plugin = true;
    join.reason = fmt::format("no tenant `{}`: the device plugin removed it (its pod is gone), or the scheduler "
                              "restarted and the plugin has not made it again yet",
                              join.tenant);
    return join;
  }
  join.plugin = true;
  if (colon == std::string_view::npos || !same_key(key, text(it->second.spec.key))) {
    join.reason = fmt::format("tenant `{}` was made by the device plugin for one container; CUSLICE_TENANT does not "
                              "carry its credential",
                              join.tenant);
    return join;
  }
  if (it->second.bound_cgroup && !under(cgroup, *it->second.bound_cgroup)) {
    join.reason = fmt::format("tenant `{}` belongs to the pod of cgroup {}, not to this process's ({})", join.tenant,
                              *it->second.bound_cgroup, cgroup.empty() ? "unknown" : cgroup);
    return join;
  }
  join.ok = true;
  return join;
}

void PluginTenants::joined(const std::string& tenant, const std::string& cgroup) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end() && !it->second.bound_cgroup && !cgroup.empty()) it->second.bound_cgroup = pod_cgroup(cgroup);
}

std::vector<wire::PluginTenant> PluginTenants::list() const {
  std::vector<wire::PluginTenant> out;
  for (const auto& [name, r] : tenants_) out.push_back(r.spec);
  return out;
}

std::string PluginTenants::over_gpu(const wire::PluginTenant& spec, const std::string& name, const Config& file) const {
  const double asked = spec.share_ppm != 0 ? ppm_to_percent(spec.share_ppm) : kMinImplicitShare;
  for (uint32_t gpu = 0; gpu < shm::kMaxGpus; ++gpu) {
    if (!((gpus_of(spec) >> gpu) & 1u)) continue;
    double given = 0;     // explicit shares of the GPU's other tenants, percent
    size_t implicit = 0;  // its tenants without a share: kMinImplicitShare each, at least
    for (const TenantConfig& t : file.tenants) {
      if (!t.on_gpu(gpu)) continue;
      if (t.share_percent) given += *t.share_percent;
      else ++implicit;
    }
    for (const auto& [other, r] : tenants_) {
      if (other == name || !((gpus_of(r.spec) >> gpu) & 1u)) continue;
      if (r.spec.share_ppm != 0) given += ppm_to_percent(r.spec.share_ppm);
      else ++implicit;
    }
    const double reserved = given + static_cast<double>(implicit) * kMinImplicitShare;
    if (reserved + asked > 100.0 + 1e-9)
      return fmt::format("tenant `{}`: GPU {} has {:g}% of its time given to other tenants, so {:g}% more would be "
                         "over 100%",
                         name, gpu, reserved, asked);
  }
  return {};
}

void PluginTenants::append_to(Config& config) const {
  for (const auto& [name, r] : tenants_) {
    if (config.find_tenant(name) >= 0) continue;
    TenantConfig t;
    t.name = name;
    t.priority = static_cast<Priority>(r.spec.priority);
    t.memory = SizeSpec{SizeSpec::Kind::kBytes, r.spec.memory_bytes, 0.0};
    // Without a share (a container that asked for memory only): a part of what its GPU's
    // explicit shares leave, as a file tenant without one gets.
    if (r.spec.share_ppm != 0) t.share_percent = ppm_to_percent(r.spec.share_ppm);
    t.limit_percent = ppm_to_percent(r.spec.limit_ppm);
    t.allow_env = false;  // joined through check_join only
    t.gpu_mask = gpus_of(r.spec);
    config.tenants.push_back(std::move(t));
  }
}

TenantWorkloads PluginTenants::workloads() const {
  TenantWorkloads out;
  for (const auto& [name, r] : tenants_)
    if (r.spec.pod_namespace[0] || r.spec.pod_name[0] || r.spec.container_name[0])
      out[name] = {text(r.spec.pod_namespace), text(r.spec.pod_name), text(r.spec.container_name)};
  return out;
}

}  // namespace cuslice
