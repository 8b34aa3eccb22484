// Fuzz target: the scheduler's configuration parser (config/tenant_config.h) on any bytes.
// Beyond "no crash, no undefined behaviour", it checks what the parser promises: a file it
// accepts fits the segment and the scheduler's ranges, and every error is one short line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "config/tenant_config.h"

namespace {

void require(bool holds) {
  if (!holds) std::abort();
}

void check_accepted(const cuslice::Config& c) {
  using namespace cuslice;
  require(!c.tenants.empty() && c.tenants.size() <= kMaxConfigTenants);
  require(c.scheduler.quantum >= kMinQuantum && c.scheduler.quantum <= kMaxQuantum);
  require(c.scheduler.limit_window >= kMinLimitWindow && c.scheduler.limit_window <= kMaxLimitWindow);
  std::set<std::string> names;
  for (const TenantConfig& t : c.tenants) {
    require(valid_tenant_name(t.name) && names.insert(t.name).second);
    if (t.memory && t.memory->kind == SizeSpec::Kind::kPercent)
      require(t.memory->percent >= kMinPercent && t.memory->percent <= 100.0);
    if (t.memory && t.memory->kind == SizeSpec::Kind::kBytes) require(t.memory->bytes > 0);
    if (t.share_percent) require(*t.share_percent >= kMinPercent && *t.share_percent <= t.limit_percent);
    require(t.limit_percent >= kMinPercent && t.limit_percent <= 100.0);
  }
  // Each GPU's tenants' shares fit in it.
  for (uint32_t g = 0; g < kMaxConfigGpus; ++g) {
    const std::vector<double> shares = c.effective_shares(g);
    double total = 0;
    for (size_t i = 0; i < c.tenants.size(); ++i)
      if (c.tenants[i].on_gpu(g)) total += shares[i];
    require(total <= 100.0 + 1e-6);
  }
  if (c.scheduler.default_tenant) require(c.find_tenant(*c.scheduler.default_tenant) >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader refuses larger files before parsing; the fuzzer need not try them.
  if (size > cuslice::kMaxConfigFileBytes) return -1;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const cuslice::ConfigResult r = cuslice::parse_config(text, "fuzz.yaml");
  if (r.ok()) {
    check_accepted(r.config);
    return 0;
  }
  require(r.errors.size() <= cuslice::kMaxConfigErrors + 1);
  for (const cuslice::ConfigError& e : r.errors) {
    const std::string line = e.to_string();
    require(line.find_first_of("\n\r") == std::string::npos);
    // A message quotes at most a short excerpt (a few of them, plus its own words).
    require(e.message.size() <= 600);
  }
  return 0;
}
