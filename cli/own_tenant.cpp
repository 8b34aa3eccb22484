// The name of a command's own tenant (own_tenant.h).
#include "cli/own_tenant.h"

#include <string>
#include <string_view>

#include "config/tenant_config.h"

namespace cuslice::cli {
namespace {

// The longest suffix ("-" and the largest pid_t) must leave room for the program's name.
static_assert(kMaxTenantNameLength >= 2 * (sizeof "-2147483647" - 1));

// The configuration's rule, one character at a time, so that the two cannot drift apart.
bool allowed(char c) { return valid_tenant_name(std::string_view(&c, 1)); }

}  // namespace

std::string own_tenant_name(std::string_view command, pid_t pid) {
  const size_t slash = command.rfind('/');
  const std::string_view program = slash == std::string_view::npos ? command : command.substr(slash + 1);
  std::string name;
  bool replacing = false;  // inside a run of characters that became one '_'
  for (const char c : program) {
    if (allowed(c)) name += c;
    else if (!replacing) name += '_';
    replacing = !allowed(c);
  }
  if (name.empty()) name = "command";
  const std::string suffix = "-" + std::to_string(pid);
  if (name.size() + suffix.size() > kMaxTenantNameLength) name.resize(kMaxTenantNameLength - suffix.size());
  return name + suffix;
}

}  // namespace cuslice::cli
