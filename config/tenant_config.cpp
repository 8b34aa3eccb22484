// The tenant model's own methods (Config, tenant_config.h): looking a tenant up by name and
// each tenant's effective share. Pure functions of a Config, valid or not: no I/O, no errors.
//
// Never parses, never reports an error: reading a file is config_file.cpp's, parsing
// config_parser.cpp's, the rules config_validation.cpp's, the messages config_errors.cpp's.
#include "config/tenant_config.h"

#include <algorithm>

namespace cuslice {

int Config::find_tenant(std::string_view name) const {
  for (size_t i = 0; i < tenants.size(); ++i)
    if (tenants[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<double> Config::effective_shares(uint32_t gpu) const {
  double explicit_total = 0;
  size_t implicit = 0;
  for (const TenantConfig& t : tenants) {
    if (!t.on_gpu(gpu)) continue;
    if (t.share_percent) explicit_total += *t.share_percent;
    else ++implicit;
  }
  const double each = implicit ? std::max(kMinImplicitShare, (100.0 - explicit_total) / implicit) : 0.0;
  std::vector<double> shares;
  for (const TenantConfig& t : tenants) shares.push_back(t.on_gpu(gpu) ? t.share_percent.value_or(each) : kMinImplicitShare);
  return shares;
}

}  // namespace cuslice
