#include "dra_plugin/claim_preparer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/atomic_file.h"
#include "common/cdi_spec.h"
#include "dra_plugin/claim_cdi.h"
#include "node/random_hex.h"
#include "protocol/ppm.h"

namespace cuslice::dra {
namespace {

template <size_t N>
void copy(char (&to)[N], const std::string& from) {
  std::memset(to, 0, N);
  std::strncpy(to, from.c_str(), N - 1);
}

std::string claim_text(const ClaimRef& c) { return c.name_space + "/" + c.name + " (" + c.uid + ")"; }

// The hook registers with CUSLICE_TENANT ("<tenant>:<key>") in a field of 63 characters
// (wire::RegisterRequest::tenant): the key takes what the tenant's name leaves, 22 hex digits
// (88 bits) beside "dra-" and a 36-character UID, at most 32, at least the scheduler's 16.
// A longer value would be cut there, and no process could ever join the tenant.
constexpr size_t kTenantEnvMax = sizeof(wire::RegisterRequest{}.tenant) - 1;
constexpr size_t kKeyDigitsMax = 32;
constexpr size_t kKeyDigitsMin = 16;

size_t key_digits(const std::string& tenant) {
  const size_t room = kTenantEnvMax > tenant.size() + 1 ? kTenantEnvMax - tenant.size() - 1 : 0;
  return std::min(room, kKeyDigitsMax);
}

// Which prepared claims (and shares) hold each of `claim`'s devices now.
void log_holders_of(const PreparedClaim& claim, const std::map<std::string, PreparedClaim>& claims) {
  const auto held = holders(claims);
  for (const AllocatedDevice& d : claim.devices) {
    const auto it = held.find(d.pool + "/" + d.device);
    spdlog::debug("{}/{}: held by {}", d.pool, d.device,
                  it == held.end() ? std::string("no prepared claim") : fmt::format("{}", fmt::join(it->second, ", ")));
  }
}

}  // namespace

bool ClaimPreparer::load(std::string& why) {
  std::lock_guard lock(mutex_);
  return checkpoint_.load(why);
}

void ClaimPreparer::set_gpus(std::vector<node::GpuInfo> gpus) {
  std::lock_guard lock(mutex_);
  gpus_ = std::move(gpus);
}

size_t ClaimPreparer::prepared() const {
  std::lock_guard lock(mutex_);
  return checkpoint_.claims.size();
}

std::string ClaimPreparer::make_tenant(const PreparedClaim& c) const {
  wire::PluginTenant t;
  copy(t.name, c.tenant);
  copy(t.key, c.key);
  t.gpu = c.plan.gpus.front();
  for (uint32_t g : c.plan.gpus) t.gpu_mask |= 1u << g;
  t.share_ppm = percent_to_ppm(c.plan.compute_percent);
  t.limit_ppm = options_.cap_compute ? t.share_ppm : kPpmWhole;
  t.memory_bytes = c.plan.memory_bytes;
  copy(t.gpu_uuid, c.gpu_uuids.front());
  copy(t.pod_namespace, c.name_space);
  copy(t.pod_name, c.pod);
  const node::SchedulerAnswer answer = scheduler_.apply(t);
  return answer.ok() ? "" : answer.message;
}

std::string ClaimPreparer::write_cdi(const PreparedClaim& c) const {
  std::vector<TenantGpu> gpus;
  for (size_t k = 0; k < c.plan.gpus.size(); ++k) {
    TenantGpu g{c.plan.gpus[k], c.gpu_uuids[k], std::nullopt};
    for (const node::GpuInfo& info : gpus_)
      if (info.index == g.index) g.minor = info.minor;
    gpus.push_back(std::move(g));
  }
  const ContainerEdits edits = tenant_edits(c.tenant, c.key, gpus, c.plan.memory_bytes, options_.mounts);
  const std::string path = cdi_spec_path(options_.cdi_dir, c.uid);
  std::string why;
  return write_if_changed(path, cdi_spec(kCdiKind, c.uid, edits).dump(2) + "\n", why, kCdiSpecMode) ? "" : why;
}

namespace {

// The claim's request a result belongs to, as a container names it: a subrequest of
// `firstAvailable` ("gpu/small") answers for its parent ("gpu"), which the kubelet matches
// against the container's `resources.claims[].request`.
std::string base_request(const std::string& request) { return request.substr(0, request.find('/')); }

}  // namespace

PrepareOutcome ClaimPreparer::answer(const PreparedClaim& c) const {
  PrepareOutcome out;
  for (const AllocatedDevice& d : c.devices)
    out.devices.push_back({{base_request(d.request)}, d.pool, d.device, {cdi_device_id(c.uid)}, d.share_id});
  return out;
}

std::string ClaimPreparer::establish(const PreparedClaim& c) const {
  if (const std::string why = make_tenant(c); !why.empty()) return "cannot make the claim's tenant: " + why;
  return write_cdi(c);
}

std::optional<PreparedClaim> ClaimPreparer::read_claim(const ClaimRef& ref, std::string& error) const {
  const ApiResponse got = api_.get(fmt::format("{}/namespaces/{}/resourceclaims/{}", kResourceApi, ref.name_space,
                                               ref.name));
  if (!got.ok()) {
    error = "cannot read ResourceClaim " + claim_text(ref) + " from the API server: " + got.describe();
    return std::nullopt;
  }
  std::string why;
  const nlohmann::json object = nlohmann::json::parse(got.body, nullptr, false);
  const std::optional<ClaimAllocation> allocation = allocation_of(object, ref.uid, options_.slice.node, why);
  std::optional<TenantPlan> plan;
  if (allocation) plan = plan_tenant(allocation->devices, gpus_, options_.slice, why);
  if (!plan) {
    error = "ResourceClaim " + claim_text(ref) + ": " + why;
    return std::nullopt;
  }
  const std::string tenant = kTenantPrefix + ref.uid;
  if (key_digits(tenant) < kKeyDigitsMin) {
    error = "ResourceClaim " + claim_text(ref) + ": its UID is too long to name a tenant a process can join";
    return std::nullopt;
  }
  PreparedClaim c{ref.uid, ref.name_space, ref.name, allocation->pod, tenant, node::random_hex(key_digits(tenant)),
                  *plan, {}, allocation->devices};
  for (uint32_t g : plan->gpus)
    for (const node::GpuInfo& info : gpus_)
      if (info.index == g) c.gpu_uuids.push_back(info.uuid);
  return c;
}

PrepareOutcome ClaimPreparer::prepare(const ClaimRef& ref) {
  std::lock_guard lock(mutex_);
  PrepareOutcome out;
  if (auto it = checkpoint_.claims.find(ref.uid); it != checkpoint_.claims.end()) {
    // Prepared before (a repeated call, or the plugin restarted): the same answer.
    out.error = establish(it->second);
    return out.error.empty() ? answer(it->second) : out;
  }
  const std::optional<PreparedClaim> c = read_claim(ref, out.error);
  if (!c) return out;
  // The checkpoint first: a plugin that dies after making the tenant still knows it.
  checkpoint_.claims[ref.uid] = *c;
  if (std::string why; !checkpoint_.save(why)) {
    checkpoint_.claims.erase(ref.uid);
    out.error = why;
    return out;
  }
  if (out.error = establish(*c); !out.error.empty()) {
    forget(ref.uid);
    return out;
  }
  spdlog::info("prepared ResourceClaim {}: tenant {}, {} bytes and {}% on GPU {}", claim_text(ref), c->tenant,
               c->plan.memory_bytes, c->plan.compute_percent, fmt::join(c->plan.gpus, ","));
  log_holders_of(*c, checkpoint_.claims);
  return answer(*c);
}

// Removes the tenant, the CDI spec and the checkpoint entry; "" or why not.
std::string ClaimPreparer::forget(const std::string& uid) {
  auto it = checkpoint_.claims.find(uid);
  if (it == checkpoint_.claims.end()) return "";
  // A scheduler that does not answer has no tenant to remove once it is back (it restarted),
  // or reconcile() removes it then.
  const node::SchedulerAnswer removed = scheduler_.remove(it->second.tenant);
  if (removed.kind == node::SchedulerAnswer::Kind::kRefused) return "cannot remove tenant: " + removed.message;
  std::error_code ec;
  std::filesystem::remove(cdi_spec_path(options_.cdi_dir, uid), ec);
  if (ec) return "cannot remove the CDI spec: " + ec.message();
  const PreparedClaim gone = it->second;
  checkpoint_.claims.erase(it);
  std::string why;
  if (!checkpoint_.save(why)) {
    checkpoint_.claims[uid] = gone;
    return why;
  }
  log_holders_of(gone, checkpoint_.claims);
  return "";
}

std::string ClaimPreparer::unprepare(const ClaimRef& ref) {
  std::lock_guard lock(mutex_);
  if (!checkpoint_.claims.count(ref.uid)) return "";  // never prepared here, or already undone
  const std::string why = forget(ref.uid);
  if (why.empty()) spdlog::info("unprepared ResourceClaim {}", claim_text(ref));
  return why.empty() ? "" : "ResourceClaim " + claim_text(ref) + ": " + why;
}

void ClaimPreparer::reconcile(const node::SchedulerState& state) {
  std::lock_guard lock(mutex_);
  std::set<std::string> have;
  for (const wire::PluginTenant& t : state.plugin_tenants) {
    const std::string name(t.name, strnlen(t.name, sizeof t.name));
    if (name.rfind(kTenantPrefix, 0) != 0) continue;  // the device plugin's
    have.insert(name);
    const std::string uid = name.substr(std::strlen(kTenantPrefix));
    if (!checkpoint_.claims.count(uid)) {
      spdlog::info("tenant {}: no prepared claim names it; removing it", name);
      scheduler_.remove(name);
    }
  }
  for (const auto& [uid, c] : checkpoint_.claims)
    if (!have.count(c.tenant)) {
      if (const std::string why = make_tenant(c); why.empty())
        spdlog::info("tenant {}: made again for ResourceClaim {}/{}", c.tenant, c.name_space, c.name);
      else
        spdlog::warn("tenant {}: cannot make it again: {}", c.tenant, why);
    }
}

}  // namespace cuslice::dra
