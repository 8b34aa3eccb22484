// The rules across tenants (config_validation.h) and the rule for a tenant name
// (valid_tenant_name, tenant_config.h). Each rule reports at the value that breaks it, so the
// message points where the file must change.
#include "config/config_validation.h"

#include <algorithm>
#include <optional>
#include <sstream>

namespace cuslice {
namespace {

// The position recorded for `name`; a default (the file's start) if none was.
const YAML::Mark& position_of(const std::map<std::string, YAML::Mark>& marks, const std::string& name) {
  static const YAML::Mark kNone;
  const auto found = marks.find(name);
  return found != marks.end() ? found->second : kNone;
}

bool any_gpus(const Config& c) {
  return std::any_of(c.tenants.begin(), c.tenants.end(), [](const TenantConfig& t) { return t.gpu_mask != 0; });
}

// With `gpus` in the file, each GPU's tenants (those that may use it) have shares of their
// own: they must fit in 100% of that GPU, whatever the other GPUs' tenants have.
void check_share_total_per_gpu(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  for (uint32_t g = 0; g < kMaxConfigGpus; ++g) {
    double total = 0;
    for (const TenantConfig& t : c.tenants)
      if (t.on_gpu(g)) total += t.share_percent.value_or(0);
    if (total <= 100.0 + 1e-9) continue;
    std::ostringstream msg;
    msg << "the shares of the tenants that may use GPU " << g << " add up to " << total << "%, more than 100%";
    // Point at the share that first goes over, in file order.
    double running = 0;
    for (const TenantConfig& t : c.tenants) {
      if (!t.on_gpu(g) || !t.share_percent) continue;
      running += *t.share_percent;
      if (running > 100.0 + 1e-9) {
        errors.add(position_of(positions.share_marks, t.name), msg.str());
        return;
      }
    }
  }
}

// A tenant without a share gets an equal part of what the explicit shares of its GPU's
// tenants leave, at least kMinImplicitShare: on every GPU those must fit in 100%.
void check_implicit_shares_per_gpu(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  for (uint32_t g = 0; g < kMaxConfigGpus; ++g) {
    double explicit_total = 0;
    size_t implicit = 0;
    for (const TenantConfig& t : c.tenants) {
      if (!t.on_gpu(g)) continue;
      if (t.share_percent) explicit_total += *t.share_percent;
      else ++implicit;
    }
    if (implicit == 0 || explicit_total > 100.0 + 1e-9) continue;
    if (explicit_total + implicit * kMinImplicitShare <= 100.0 + 1e-9) continue;
    for (const TenantConfig& t : c.tenants) {
      if (t.share_percent || !t.on_gpu(g)) continue;
      std::ostringstream msg;
      msg << "tenant " << quoted(t.name) << " has no `compute.share`, and the explicit shares on GPU " << g << " ("
          << explicit_total << "%) leave less than " << kMinImplicitShare
          << "% to each tenant without one: give it a share, or lower the others'";
      errors.add(position_of(positions.tenant_names, t.name), msg.str());
      return;
    }
  }
}

void check_share_total(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  if (any_gpus(c)) return check_share_total_per_gpu(c, positions, errors);
  double total = 0;
  for (const TenantConfig& t : c.tenants) total += t.share_percent.value_or(0);
  if (total <= 100.0 + 1e-9) return;
  std::ostringstream msg;
  msg << "the tenants' shares add up to " << total << "%, more than 100%";
  // Point at the share that first goes over.
  double running = 0;
  for (const YAML::Node& s : positions.shares) {
    double percent = 0;
    if (!parse_percent(s.Scalar(), percent, nullptr)) continue;
    running += percent;
    if (running > 100.0 + 1e-9) {
      errors.add(s, msg.str());
      break;
    }
  }
}

// A tenant without a share gets an equal part of what the explicit shares leave, but at
// least kMinImplicitShare so that it is never starved; the shares must still fit in 100%.
void check_implicit_shares(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  if (any_gpus(c)) return check_implicit_shares_per_gpu(c, positions, errors);
  double explicit_total = 0;
  size_t implicit = 0;
  for (const TenantConfig& t : c.tenants) {
    if (t.share_percent) explicit_total += *t.share_percent;
    else ++implicit;
  }
  if (implicit == 0 || explicit_total > 100.0 + 1e-9) return;  // the latter is check_share_total's
  if (explicit_total + implicit * kMinImplicitShare <= 100.0 + 1e-9) return;
  for (const TenantConfig& t : c.tenants) {
    if (t.share_percent) continue;
    std::ostringstream msg;
    msg << "tenant " << quoted(t.name) << " has no `compute.share`, and the explicit shares (" << explicit_total
        << "%) leave less than " << kMinImplicitShare
        << "% to each tenant without one: give it a share, or lower the others'";
    errors.add(position_of(positions.tenant_names, t.name), msg.str());
    return;
  }
}

// A host pool is where a preemptible tenant's memory goes when it is suspended; another
// tenant's would never be used.
void check_host_pools(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  for (const TenantConfig& t : c.tenants)
    if (t.host_pool != 0 && !t.preemptible)
      errors.add(position_of(positions.tenant_names, t.name),
                 "tenant `" + t.name + "` has a `host_pool` but is not preemptible: the pool is where a "
                 "preemptible tenant's memory goes when it is suspended");
}

// The quotas that are guarantees, added up tenant by tenant.
struct GuaranteedTotal {
  std::optional<uint64_t> card;  // gpu_memory, when the file gives it
  uint64_t bytes = 0;
  double percent = 0;
  bool in_bytes = false;

  void add(const SizeSpec& memory) {
    if (memory.kind == SizeSpec::Kind::kPercent) {
      percent += memory.percent;
      if (card) bytes += memory.resolve(*card);
    } else {
      bytes += memory.bytes;
      in_bytes = true;
    }
  }

  // Why the total so far cannot be guaranteed, or "" while it can.
  std::string problem() const {
    if (card && bytes > *card)
      return "the quotas of the tenants that are not preemptible add up to " + std::to_string(bytes) +
             " bytes, more than the card (`gpu_memory` is " + std::to_string(*card) +
             " bytes): they are guarantees; mark tenants that may be suspended `preemptible: true`";
    if (!card && in_bytes)
      return "with preemptible tenants, give `gpu_memory` so that quotas in bytes can be checked "
             "against the card, or write the quotas of the tenants that are not preemptible as "
             "percentages";
    if (!card && percent > 100.0 + 1e-9) {
      std::ostringstream msg;
      msg << "the quotas of the tenants that are not preemptible add up to " << percent
          << "% of the card, more than 100%: they are guarantees; mark tenants that may be suspended "
             "`preemptible: true`";
      return msg.str();
    }
    return "";
  }
};

// With a preemptible tenant, the others' quotas are guarantees: each non-preemptible tenant
// needs one, and together they must fit the card (only preemptible tenants may over-commit).
// Reports the first tenant whose quota takes the sum over, then stops.
void check_guarantees(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  const bool any = std::any_of(c.tenants.begin(), c.tenants.end(), [](const auto& t) { return t.preemptible; });
  if (!any) return;
  GuaranteedTotal total{c.scheduler.gpu_memory};
  for (const TenantConfig& t : c.tenants) {
    if (t.preemptible) continue;
    if (!t.memory) {
      errors.add(position_of(positions.tenant_names, t.name),
                 "tenant `" + t.name + "` needs a `memory` quota: with preemptible tenants in "
                 "the file, the quotas of the others are guarantees (or mark it `preemptible: true`)");
      continue;
    }
    total.add(*t.memory);
    if (const std::string why = total.problem(); !why.empty()) {
      errors.add(position_of(positions.memories, t.name), why);
      return;
    }
  }
}

void check_default_tenant(const Config& c, const SourcePositions& positions, ConfigErrors& errors) {
  if (c.scheduler.default_tenant && c.find_tenant(*c.scheduler.default_tenant) < 0) {
    errors.add(positions.default_tenant, "`default_tenant` names " + quoted(*c.scheduler.default_tenant) +
                                             ", which is not a tenant in this file");
  }
}

}  // namespace

void check_across_tenants(const Config& config, const SourcePositions& positions, ConfigErrors& errors) {
  check_share_total(config, positions, errors);
  check_implicit_shares(config, positions, errors);
  check_host_pools(config, positions, errors);
  check_guarantees(config, positions, errors);
  check_default_tenant(config, positions, errors);
}

bool valid_tenant_name(std::string_view name) {
  const bool charset = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
  return !name.empty() && name.size() <= kMaxTenantNameLength && charset;
}

}  // namespace cuslice
