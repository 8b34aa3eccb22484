// What the driver says each process holds, set against what the tenants are allowed: the
// check that catches what the hook cannot prevent. A process that bypasses the hook (a static
// binary that never loads libcuda.so.1 through the loader, LD_PRELOAD removed, direct ioctls)
// allocates without being charged; the driver still counts its memory, and NVML reports it
// per process. Once a second the daemon feeds this class the driver's per-process figures
// and the registered processes; it answers which tenants are over their quota beyond an
// allowance and which GPU processes belong to no tenant.
//
// Pure: no I/O, no clock, no NVML. The daemon owns reading NVML (nvml_reader.h) and acting
// (logging, metrics, status, killing under `on_violation: kill`).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace cuslice {

// One process the driver reports on a GPU (nvmlDeviceGetComputeRunningProcesses).
struct DriverProcess {
  pid_t pid = 0;
  uint64_t used_bytes = 0;
};

// One process registered with the daemon (it loaded the hook and asked to be scheduled).
struct RegisteredProcess {
  pid_t pid = 0;
  uint32_t tenant = 0;
  // What its hook says it holds on each GPU (the slot's `charged`), by GPU index.
  std::vector<uint64_t> charged;
};

struct WatchedTenant {
  std::string name;
  // Per GPU quota in bytes, by GPU index; nullopt: no quota on that GPU.
  std::vector<std::optional<uint64_t>> quota;
  bool kill_on_violation = false;
};

struct Violation {
  enum class Kind {
    kOverQuota,  // the tenant's processes hold more than its quota plus the allowance
    kUnhooked,   // a GPU process that no registered process accounts for
  };
  Kind kind = Kind::kOverQuota;
  uint32_t gpu = 0;
  // kOverQuota: the tenant; kUnhooked: none.
  std::optional<uint32_t> tenant;
  // What the driver says: the tenant's processes together (kOverQuota), or the process.
  uint64_t used_bytes = 0;
  uint64_t quota_bytes = 0;  // kOverQuota: quota plus allowance; kUnhooked: 0
  // kOverQuota: the process that holds the most beyond what its hook charged (the one a kill
  // policy ends); kUnhooked: the process.
  pid_t pid = 0;
  // kOverQuota only: the tenant asked for its offenders to be killed.
  bool kill = false;
  // False while the same violation was already reported by the previous check: the daemon
  // logs a violation once, when it begins, and keeps its metric and status line meanwhile.
  bool is_new = true;
};

struct WatchdogSettings {
  // The driver's figure for a process includes its contexts and kernel code, which the hook
  // charges as an estimate before it can measure them; a tenant is reported only beyond its
  // quota plus this much per process on the GPU.
  uint64_t allowance_per_process = 64ull << 20;
};

class UsageWatchdog {
 public:
  explicit UsageWatchdog(WatchdogSettings settings = {}) : settings_(settings) {}

  // `driver[g]`: the processes the driver reports on GPU g; `registered`: every registered
  // process; `tenants`: by tenant index (a registered process whose tenant index is out of
  // range counts as registered, to no tenant). A process the driver shows but nobody
  // registered is reported only from its second check on: a hooked process creates its
  // context a moment before it registers.
  std::vector<Violation> check(const std::vector<std::vector<DriverProcess>>& driver,
                               const std::vector<RegisteredProcess>& registered,
                               const std::vector<WatchedTenant>& tenants);

 private:
  struct Key {
    Violation::Kind kind;
    uint32_t gpu;
    uint64_t who;  // tenant index or pid
    bool operator==(const Key&) const = default;
  };
  // One check's results so far: each violation with its key, and the unhooked processes
  // seen for the first time.
  struct Findings {
    std::vector<Violation> found;
    std::vector<Key> keys;
    std::vector<Key> seen_once;
  };
  // A tenant's processes on one GPU, by the driver's count.
  struct TenantSum {
    uint64_t used = 0;
    uint32_t processes = 0;
    pid_t worst = 0;  // the one furthest beyond what it charged
    uint64_t worst_excess = 0;
  };
  using TenantSums = std::unordered_map<uint32_t, TenantSum>;

  // An unregistered process on GPU `g`: reported when an earlier check saw it too.
  void check_unhooked(uint32_t g, const DriverProcess& dp, Findings& findings) const;
  static void add_to_sum(uint32_t g, const DriverProcess& dp, const RegisteredProcess& rp, TenantSum& sum);
  // Each tenant whose processes on GPU `g` hold more than its quota and their allowance.
  void check_quotas(uint32_t g, const TenantSums& sums, const std::vector<WatchedTenant>& tenants,
                    Findings& findings) const;
  bool reported_before(const Key& key) const;

  WatchdogSettings settings_;
  std::vector<Key> unhooked_seen_;  // unhooked processes seen once, not yet reported
  std::vector<Key> reported_;       // violations of the previous check
};

}  // namespace cuslice
