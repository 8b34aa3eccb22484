// The scheduler's configuration: tenants, their priority, memory quota and GPU-time share.
//
// Parsed from YAML by the daemon (and the CLI's `check`); never by the hook, which learns
// everything it needs from the shared segment. Parsing never throws: every problem found is
// returned as a ConfigError naming file, line and column (1-based), so one run reports all
// mistakes in a file, not only the first. Reading the file is config_file.cpp's, parsing
// config_parser.cpp's (with node_reader.h), the rules across tenants config_validation.h's,
// the error list config_errors.h's; tenant_config.cpp holds the model's own methods.
//
// The file is written by root but read by a daemon that tenants' processes talk to, so the
// parser fails closed: anything odd (a duplicate key, a number out of range, a percentage
// finer than the segment holds, a quantum that would pin a CPU, a file too large to parse
// quickly) is an error, never a silent default. Errors quote at most a short, escaped
// excerpt of the input, so that a message can neither flood a log nor forge a line of it.
//
//   scheduler:
//     quantum: 100ms           # slice length; default 100ms
//     limit_window: 1s         # window over which `compute.limit` is enforced; default 1s
//     lower_priority_timeslice: 200us  # the GPU's time slice for a tenant's processes while
//                              # a tenant of higher priority is registered: its work waits at
//                              # most this long for the GPU; off: the driver's (1-2 ms)
//     gpu_memory: 80GiB        # memory of each card; optional, enables the "over the card"
//                              # check and lets the daemon resolve "25%" into bytes
//     default_tenant: batch    # where processes of no tenant go; absent: they are refused
//     metrics_port: 9400       # serve Prometheus metrics over HTTP; absent: no metrics
//     preemption:              # memory preemption (docs/design/preemption.md); every key optional
//       allocation_wait: 60s   #   how long an allocation waits for tenants to be suspended
//       resume_holdoff: 1s     #   how long a suspended tenant's memory must stay free first
//       host_reserve: 4GiB     #   host memory left available after a suspension
//       resume_margin: 512MiB  #   card memory left free after a resume
//       room_margin: 1GiB      #   card memory made beyond a request that suspends
//       unsuspendable: stop    #   stop | keep: a preemptible tenant's process that cannot be
//                              #   suspended (it says it uses what the checkpoint cannot move,
//                              #   or the driver refuses it) is stopped, or the tenant kept
//       fast: true             #   move only what is needed, from inside the hook, where a
//                              #   tenant's processes can; false: always the driver's checkpoint
//     metrics_address: ::1     # where; default 127.0.0.1 (IPv4 or IPv6 literal)
//     spatial:                 # tenants side by side through MPS (docs/design/spatial.md)
//       gpus: [0]              #   GPUs whose tenants run concurrently, or `all`
//       mps_control: /usr/bin/nvidia-cuda-mps-control  # default: found on PATH
//       pipe_directory: /run/cuslice/mps   # default: `mps` beside the tenant socket
//       log_directory: /var/log/cuslice-mps  # default: `mps-log` beside the tenant socket
//   tenants:
//     - name: inference
//       priority: high         # high | normal | low; default normal
//       memory: 20GiB          # per GPU, bytes or % of the card; absent: no tenant quota
//       compute: {share: 60%, limit: 80%}   # share absent: an equal part of what is left
//                              # on a spatial GPU also `sm: 25%`: the SMs its kernels may use
//       spatial: false         # on spatial GPUs, time-slice against them instead; default true
//       match: {uid: 1001, gid: 100, cgroup: /kubepods/burstable}  # all given must hold
//       allow_env: true        # accept CUSLICE_TENANT=inference from any process; default
//                              # false: only from processes `match` selects
//       preemptible: false     # true: may be suspended to host memory for higher priorities,
//                              # and may hold memory the card cannot guarantee
//       host_pool: 24GiB       # preemptible: pinned host memory each of its processes prepares
//                              # for the fast suspension; default 0 (pageable memory, slower)
//
// With a preemptible tenant in the file, the quotas of the others are guarantees: each needs a
// `memory`, and together they must fit the card.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/size.h"

namespace cuslice {

enum class Priority : uint8_t { kLow = 0, kNormal = 1, kHigh = 2 };

// Rules that put a process into a tenant without CUSLICE_TENANT. Every rule given must hold;
// a tenant with no rule is joined only by name (or as the default tenant).
struct TenantMatch {
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<std::string> cgroup_prefix;  // compared with the cgroup v2 path, e.g. /a/b

  bool empty() const { return !uid && !gid && !cgroup_prefix; }
};

struct TenantConfig {
  std::string name;
  Priority priority = Priority::kNormal;
  std::optional<SizeSpec> memory;       // per GPU; absent: no tenant-wide quota
  std::optional<double> share_percent;  // (0, 100]; absent: see effective_shares()
  double limit_percent = 100.0;         // (0, 100]; 100 means uncapped
  // Off unless the file says so: a tenant joined by name alone is anybody's to join.
  bool allow_env = false;
  // What the usage watchdog does when the driver shows the tenant over its quota (a process
  // that bypassed the hook): report (log, metric, status) or also kill the process holding
  // the most beyond what its hook charged.
  bool kill_on_violation = false;
  TenantMatch match;
  bool preemptible = false;
  // The GPUs (NVML indices, as nvidia-smi numbers them) the tenant may use: bit g for GPU g.
  // 0: every GPU of the node. Its share, limit and priority hold on each of them
  // independently, and its memory quota on each (docs/reference/configuration.md).
  uint32_t gpu_mask = 0;
  // Preemptible tenants: pinned host memory each process prepares, in the background, for the
  // fast suspension to copy into (docs/design/preemption.md). 0: it copies into pageable memory.
  uint64_t host_pool = 0;
  // On spatial GPUs (SpatialSettings): the SMs its kernels may use, in whole percent (MPS's
  // active thread percentage); absent: the whole card. `spatial: false` keeps it time-sliced.
  std::optional<uint32_t> sm_percent;
  bool spatial = true;

  bool on_gpu(uint32_t gpu) const { return gpu_mask == 0 || (gpu < 32 && ((gpu_mask >> gpu) & 1u)); }
};

// Memory preemption's settings (docs/design/preemption.md).
struct PreemptionSettings {
  // A checkpoint moves about 1.6 GiB/s on an H100 (docs/evidence/benchmarks.md): 60 s covers most of a
  // card's memory.
  std::chrono::nanoseconds allocation_wait = std::chrono::seconds(60);
  std::chrono::nanoseconds resume_holdoff = std::chrono::seconds(1);
  uint64_t host_reserve = uint64_t{4} << 30;
  uint64_t resume_margin = uint64_t{512} << 20;
  // Card memory made beyond a request that suspends a tenant: what the requester's context
  // takes next (lazily loaded modules, cuBLAS and cuDNN workspaces, the caching allocator's
  // next block). A PyTorch process takes up to about 1 GiB on an H200 beyond its tensors.
  uint64_t room_margin = uint64_t{1} << 30;
  // What becomes of a preemptible tenant's process that cannot be suspended when the tenant's
  // memory is needed: true (`stop`), it is killed and the others suspended; false (`keep`), the
  // tenant keeps its memory. What a process says of itself never spares its tenant by default.
  bool stop_unsuspendable = true;
  // Suspend a tenant by moving only what is needed from inside its processes' hooks where
  // they can (docs/design/preemption.md, "Two ways to suspend"); false: always the driver's checkpoint.
  bool fast = true;
};

// Tenants side by side (docs/design/spatial.md): GPUs whose tenants run concurrently through an
// MPS control daemon the scheduler starts and owns.
struct SpatialSettings {
  uint32_t gpu_mask = 0;  // bit g: GPU g is spatial
  bool all_gpus = false;  // `gpus: all`
  std::string mps_control;     // empty: nvidia-cuda-mps-control on PATH
  std::string pipe_directory;  // empty: `mps` beside the tenant socket
  std::string log_directory;   // empty: `mps-log` beside the tenant socket

  bool any() const { return all_gpus || gpu_mask != 0; }
  bool operator==(const SpatialSettings&) const = default;
  bool on_gpu(uint32_t gpu) const { return all_gpus || (gpu < 32 && ((gpu_mask >> gpu) & 1u)); }
  // Whether every GPU of `tenant_gpus` (a TenantConfig::gpu_mask; 0: all) is spatial: only
  // then do the tenant's processes join MPS, which would hide the other GPUs from them.
  bool covers(uint32_t tenant_gpus) const { return all_gpus || (tenant_gpus != 0 && (tenant_gpus & ~gpu_mask) == 0); }
};

struct SchedulerSettings {
  // 100 ms: each handoff costs about 0.25 ms of GPU time on an H100 (docs/evidence/benchmarks.md), so
  // 20 ms slices lost 1.6-2.4% of the GPU under contention, 100 ms slices 0.3-0.5%.
  std::chrono::nanoseconds quantum = std::chrono::milliseconds(100);
  std::chrono::nanoseconds limit_window = std::chrono::seconds(1);
  // 0: off. 200 us: a higher-priority request waited 0.4-0.5 ms more than alone at p99 on an
  // H100 beside long kernels, where 100 us cost the low tenant more preemptions
  // (docs/evidence/benchmarks.md, "Time slices").
  std::chrono::microseconds lower_priority_timeslice{200};
  std::optional<uint64_t> gpu_memory;         // bytes of each card
  std::optional<std::string> default_tenant;  // absent: processes of no tenant are refused
  std::optional<uint16_t> metrics_port;       // 1-65535; absent: no metrics endpoint
  PreemptionSettings preemption;
  std::optional<std::string> metrics_address;  // an IPv4 or IPv6 literal; absent: loopback
  SpatialSettings spatial;
};

struct Config {
  SchedulerSettings scheduler;
  std::vector<TenantConfig> tenants;

  // Whether `t` runs in the spatial group of GPU `gpu`: the GPU is spatial, the tenant may use
  // it, did not opt out, and every GPU it may use is spatial (its processes join MPS).
  bool spatial_member(const TenantConfig& t, uint32_t gpu) const {
    return t.spatial && t.on_gpu(gpu) && scheduler.spatial.on_gpu(gpu) && scheduler.spatial.covers(t.gpu_mask);
  }

  // Index into `tenants`, or -1.
  int find_tenant(std::string_view name) const;
  // Every tenant's share of GPU `gpu` in percent. A tenant that may use the GPU: its explicit
  // share as written, or without one an equal part of what the explicit shares of the
  // tenants on that GPU leave (at least kMinImplicitShare, so that it is never starved). A
  // tenant that may not use the GPU: kMinImplicitShare, which is what it gets there should
  // one of its processes use the GPU anyway. In a valid file the shares of the tenants that
  // may use a GPU add up to at most 100%.
  std::vector<double> effective_shares(uint32_t gpu) const;
};

inline constexpr double kMinImplicitShare = 1.0;  // percent

// The limits the shared segment can hold; checked here so that a valid file always fits.
inline constexpr size_t kMaxConfigTenants = 64;
inline constexpr size_t kMaxTenantNameLength = 63;
// GPUs per node (shm::kMaxGpus): a tenant's `gpus` are indices below this.
inline constexpr uint32_t kMaxConfigGpus = 16;

// A larger file is refused before it is parsed: a reload runs on the scheduler's thread, and
// a file of a few megabytes keeps it (and every tenant waiting for a token) busy for seconds.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;
// The segment holds percentages in millionths (ppm): a finer one would round to 0, which
// means "none" (no quota, no share), so it is refused.
inline constexpr double kMinPercent = 0.0001;
// Below 1 ms the scheduler would hand the token over faster than a handoff costs, and
// spin a CPU doing it; above 10 s a tenant of equal priority waits that long for the GPU.
inline constexpr std::chrono::nanoseconds kMinQuantum = std::chrono::milliseconds(1);
inline constexpr std::chrono::nanoseconds kMaxQuantum = std::chrono::seconds(10);
// The window of `compute.limit`: long enough to hold a few slices, short enough that the
// scheduler's record of it (a list of slices) stays small.
inline constexpr std::chrono::nanoseconds kMinLimitWindow = std::chrono::milliseconds(10);
inline constexpr std::chrono::nanoseconds kMaxLimitWindow = std::chrono::seconds(60);
// `lower_priority_timeslice`: a switch between contexts costs tens of microseconds, so a
// shorter slice is mostly switching; the driver's own slices are 1-2 ms, so a longer one is
// no shorter than theirs.
inline constexpr std::chrono::nanoseconds kMinLowerTimeslice = std::chrono::microseconds(50);
inline constexpr std::chrono::nanoseconds kMaxLowerTimeslice = std::chrono::milliseconds(2);
// `host_pool`: the segment carries it in MiB, in 32 bits.
inline constexpr uint64_t kMaxHostPool = uint64_t{1} << 50;
// uid_t and gid_t are 32 bits, and (uid_t)-1 is no one's id.
inline constexpr uint32_t kMaxId = UINT32_MAX - 1;
// At most this many errors are listed for one file; a last one says how many were left out.
inline constexpr size_t kMaxConfigErrors = 50;

// The rule for tenant names, in the file and from `cuslice run`: 1 to kMaxTenantNameLength
// characters of letters, digits, '-', '_' or '.'. Such a name is valid UTF-8 and printable,
// so it can go into JSON, a log line and a Prometheus label as it is.
bool valid_tenant_name(std::string_view name);

// `text` as an error message may quote it: at most kMaxExcerpt characters (then "..."),
// with control characters, invalid UTF-8 and other unprintable characters escaped (\n,
// \x01, \u202e), so a quoted value never breaks or forges a log line.
inline constexpr size_t kMaxExcerpt = 40;
std::string excerpt(std::string_view text);

struct ConfigError {
  std::string file;
  int line = 0;    // 1-based; 0 when the error concerns the whole file (e.g. unreadable)
  int column = 0;  // 1-based; 0 with line 0
  std::string message;

  // "file:line:column: message", or "file: message" for whole-file errors.
  std::string to_string() const;
};

struct ConfigResult {
  Config config;                   // meaningful only when ok()
  std::vector<ConfigError> errors;  // in file order

  bool ok() const { return errors.empty(); }
};

// Reads and validates `path`: a regular file of at most kMaxConfigFileBytes (a directory,
// a device, a FIFO or a larger file is refused before anything is read from it).
ConfigResult load_config_file(const std::string& path);
// Validates YAML text; `file_name` is only used in the errors.
ConfigResult parse_config(std::string_view yaml_text, const std::string& file_name);

}  // namespace cuslice
