// The rules across tenants, checked once the whole file has been read: the shares fit in
// 100%, each tenant without a share is still left kMinImplicitShare, with a preemptible
// tenant the quotas of the others are guarantees that fit the card, and `default_tenant`
// names a tenant of the file. The rule for one tenant name alone, valid_tenant_name(), is in
// tenant_config.h because the CLI and the scheduler apply it too.
//
// Internal to cuslice_config. Reads the parsed Config and where its values were written
// (SourcePositions, filled by the parser); never reads a YAML value and never changes the
// Config.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "config/config_errors.h"
#include "config/tenant_config.h"

namespace cuslice {

// Where the values the rules point at were written.
struct SourcePositions {
  YAML::Mark default_tenant;                       // `scheduler.default_tenant`
  std::vector<YAML::Node> shares;                  // every `compute.share` in file order, even unusable ones
  std::map<std::string, YAML::Mark> tenant_names;  // each tenant's `name`
  std::map<std::string, YAML::Mark> memories;      // each tenant's `memory`
  std::map<std::string, YAML::Mark> share_marks;   // each named tenant's `compute.share`
};

void check_across_tenants(const Config& config, const SourcePositions& positions, ConfigErrors& errors);

}  // namespace cuslice
