// The name of the tenant a command gets when `cuslice run` is given no --tenant and its
// scheduler is ephemeral: the program's name and the command's process id ("python3-4242"),
// so that `cuslice status` reads as a list of what runs, and two runs of one program never
// share a tenant (and so never clash over their quotas).
//
// Pure: no environment, no I/O; the caller passes the pid. When a command gets a tenant of its
// own at all, and what else the request holds, is scheduler_join.cpp's.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace cuslice::cli {

// The rule, one step each:
//   1. the program: `command` after its last '/' ("/usr/bin/python3" -> "python3");
//   2. each run of characters a tenant name may not hold (letters, digits, '-', '_', '.' are
//      kept: valid_tenant_name, tenant_config.h) becomes one '_' ("my job" -> "my_job");
//   3. nothing left (a command that ends in '/'): "command";
//   4. cut to leave room for "-<pid>" within kMaxTenantNameLength, then "-<pid>" appended.
// pre: pid > 0 (the pid of `cuslice run`, which the command keeps across exec).
// post: valid_tenant_name(result).
std::string own_tenant_name(std::string_view command, pid_t pid);

}  // namespace cuslice::cli
