#include "scheduler/tenants/ephemeral_tenants.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "protocol/ppm.h"

namespace cuslice {
namespace {

std::string percent_text(double percent) { return fmt::format("{:g}%", percent); }

std::string memory_text(const std::optional<SizeSpec>& memory) {
  if (!memory) return "none";
  if (memory->kind == SizeSpec::Kind::kPercent) return percent_text(memory->percent);
  return fmt::format("{} bytes", memory->bytes);
}

std::string gpus_text(uint32_t mask) {
  if (mask == 0) return "all";
  std::string out;
  for (uint32_t g = 0; g < 32; ++g)
    if ((mask >> g) & 1u) out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

// Why `want` does not fit beside `config`'s tenants: on some GPU both use, their shares
// would add up to more than 100%. Empty when it fits.
std::string over_a_gpu(const Config& config, const TenantConfig& want) {
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    if (!want.on_gpu(g)) continue;
    double shares = want.share_percent.value_or(0);
    for (const TenantConfig& t : config.tenants)
      if (t.on_gpu(g)) shares += t.share_percent.value_or(0);
    if (shares <= 100.0 + 1e-9) continue;
    const bool everywhere = want.gpu_mask == 0 &&
                            std::all_of(config.tenants.begin(), config.tenants.end(),
                                        [](const TenantConfig& t) { return t.gpu_mask == 0; });
    if (everywhere) return fmt::format("the tenants' shares would add up to {:g}%, more than 100%", shares);
    return fmt::format("the shares of the tenants on GPU {} would add up to {:g}%, more than 100%", g, shares);
  }
  return {};
}

const char* priority_text(Priority p) {
  return p == Priority::kHigh ? "high" : p == Priority::kLow ? "low" : "normal";
}

bool same_memory(const std::optional<SizeSpec>& a, const std::optional<SizeSpec>& b) {
  if (!a || !b) return !a && !b;
  if (a->kind != b->kind) return false;
  return a->kind == SizeSpec::Kind::kBytes ? a->bytes == b->bytes : std::abs(a->percent - b->percent) < 1e-9;
}

// The spec as a TenantConfig, or the reason it is not one.
std::optional<TenantConfig> to_tenant(const wire::TenantSpec& spec, std::string& why) {
  TenantConfig t;
  // `cuslice run` starts its command with CUSLICE_TENANT: its tenants are joined by name.
  t.allow_env = true;
  t.name.assign(spec.name, strnlen(spec.name, sizeof spec.name));
  if (!valid_tenant_name(t.name)) {
    why = fmt::format("bad tenant name `{}`: 1 to {} characters of letters, digits, '-', '_' or '.'", t.name,
                      kMaxTenantNameLength);
    return std::nullopt;
  }
  if (spec.priority > 2) {
    why = "bad priority: expected high, normal or low";
    return std::nullopt;
  }
  t.priority = static_cast<Priority>(spec.priority);
  if (spec.share_ppm > kPpmWhole || spec.limit_ppm == 0 || spec.limit_ppm > kPpmWhole || spec.memory_ppm > kPpmWhole) {
    why = "a share, limit or memory percentage is outside (0%, 100%]";
    return std::nullopt;
  }
  if (spec.share_ppm != 0) t.share_percent = ppm_to_percent(spec.share_ppm);
  t.limit_percent = ppm_to_percent(spec.limit_ppm);
  if (t.share_percent && t.limit_percent < *t.share_percent) {
    why = "the limit is below the share: the tenant could never get its share";
    return std::nullopt;
  }
  if (spec.memory_bytes != 0 && spec.memory_ppm != 0) {
    why = "memory is given both in bytes and as a percentage";
    return std::nullopt;
  }
  if (spec.gpu_mask >> shm::kMaxGpus) {
    why = fmt::format("a GPU index is beyond the {} the scheduler holds", shm::kMaxGpus);
    return std::nullopt;
  }
  t.gpu_mask = spec.gpu_mask;
  if (spec.memory_bytes != 0) t.memory = SizeSpec{SizeSpec::Kind::kBytes, spec.memory_bytes, 0.0};
  if (spec.memory_ppm != 0) t.memory = SizeSpec{SizeSpec::Kind::kPercent, 0, ppm_to_percent(spec.memory_ppm)};
  return t;
}

// The first parameter in which `have` and `want` differ, or "".
std::string difference(const TenantConfig& have, const TenantConfig& want) {
  if (have.priority != want.priority)
    return fmt::format("priority {} (asked: {})", priority_text(have.priority), priority_text(want.priority));
  if (have.share_percent != want.share_percent)
    return fmt::format("share {} (asked: {})", have.share_percent ? percent_text(*have.share_percent) : "none",
                       want.share_percent ? percent_text(*want.share_percent) : "none");
  if (std::abs(have.limit_percent - want.limit_percent) > 1e-9)
    return fmt::format("limit {} (asked: {})", percent_text(have.limit_percent), percent_text(want.limit_percent));
  if (!same_memory(have.memory, want.memory))
    return fmt::format("memory {} (asked: {})", memory_text(have.memory), memory_text(want.memory));
  if (have.gpu_mask != want.gpu_mask)
    return fmt::format("GPUs {} (asked: {})", gpus_text(have.gpu_mask), gpus_text(want.gpu_mask));
  return {};
}

}  // namespace

EnsureOutcome ensure_tenant(Config& config, const wire::TenantSpec& spec) {
  EnsureOutcome out;
  std::string why;
  std::optional<TenantConfig> want = to_tenant(spec, why);
  if (!want) {
    out.message = why;
    return out;
  }
  if (const int existing = config.find_tenant(want->name); existing >= 0) {
    const std::string differs = difference(config.tenants[existing], *want);
    if (!differs.empty()) {
      out.message = fmt::format("tenant `{}` already runs with {}; pick another --tenant name, or the same flags",
                                want->name, differs);
      return out;
    }
    out.ok = true;
    out.message = fmt::format("joined tenant `{}`", want->name);
    return out;
  }
  if (config.tenants.size() >= kMaxConfigTenants) {
    out.message = fmt::format("already {} tenants, the most the scheduler holds", kMaxConfigTenants);
    return out;
  }
  if (std::string over = over_a_gpu(config, *want); !over.empty()) {
    out.message = over;
    return out;
  }
  out.message = fmt::format("added tenant `{}`", want->name);
  config.tenants.push_back(std::move(*want));
  out.ok = true;
  out.added = true;
  return out;
}

}  // namespace cuslice
