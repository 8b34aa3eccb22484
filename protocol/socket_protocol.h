// Registration of a hooked process with cuslice-scheduler, over a Unix socket.
//
// The socket is SOCK_SEQPACKET, so every message arrives whole or not at all:
//   1. hook -> daemon: one RegisterRequest.
//   2. daemon -> hook: one RegisterReply. The daemon learns pid, uid and gid from the kernel
//      (SO_PEERCRED), never from the message. A reply with kOk carries file descriptors
//      (SCM_RIGHTS): first the tenant's region (shm_protocol.h, TenantRegion), a sealed
//      memfd the hook maps read-write. Only this reply ever carries it, so a process holds a
//      tenant's region only once the daemon accepted it into that tenant. Then the segment,
//      opened read-only: the hook maps the segment of the daemon it talks to, even where the
//      name shows an older one (a container's bind mount of the file of a scheduler since
//      restarted). From a daemon that sends no second descriptor, the hook opens the segment
//      the reply names. Either way it maps it read-only, after checking with SO_PEERCRED that
//      the daemon's user (or root) owns it.
//   3. From then on the hook sends only kicks (one byte, any value): "look at my GPUs now",
//      sent when it starts waiting for a token or goes idle while holding one; its workload
//      (WorkloadMessage), once; MemoryRequests, when an allocation did not fit the card; and
//      BlockerClaims, when it first uses what the driver's checkpoint cannot move.
//      The daemon sends nothing more: it answers a MemoryRequest in the shared segment.
// The connection is the process's lease: when the process exits or is killed the kernel
// closes it, and the daemon gives back the process's memory and token. When the daemon goes
// away the hook sees the connection end and runs ungated until it can register again.
//
// Messages are fixed-size PODs; `version` changes with any change to them, and a daemon
// answers a request of another version with kVersionMismatch (in the reply of the version
// the request asked for when it knows it, else its own).
//
// Two sockets. The *tenant socket* (CUSLICE_SOCKET, /run/cuslice/cuslice.sock) is open to
// every local process (mode 0666) so that any process can register; its directory is what
// containers are given. The *control socket* (control_socket.h: by default
// /run/cuslice-control/cuslice.sock) lives in a directory of its own, never inside the tenant
// socket's, is created mode 0600 (its directory 0700 when the daemon creates it) and is meant
// for `cuslice` and the device plugin only. Requests that change the daemon or hand out
// credentials (kReload, kEnsureTenant, every PluginRequest) are accepted on the control
// socket only, and there only from root or the daemon's own uid (SO_PEERCRED): on the tenant
// socket they are answered kForbidden whoever asks, because a container that runs as root
// without a user namespace is uid 0 there. Registrations are accepted on the tenant socket
// only. Read-only requests (kDescribe, kWorkloads, kPreemption) are answered on both.
//
// Control requests (the `cuslice` tool, not hooks): the first message of a connection is
// either a RegisterRequest or a ControlRequest, told apart by `magic`; the two are versioned
// separately, so a new control command never disturbs hooks.
//   - The client sends one ControlRequest; the daemon answers one ControlReply.
//   - kDescribe: what the daemon is (pid, mode, segment name, configuration file).
//   - kReload: as SIGHUP; the reply says ok, or carries every configuration error. Control
//     socket only.
//   - kWorkloads: the Kubernetes workload (namespace, pod, container) of each tenant that has
//     one, from the device plugin or from its processes' WorkloadMessage; answered by a
//     WorkloadList instead of a ControlReply. Anybody may ask (`cuslice status`).
//   - kEnsureTenant: only for a daemon started with --ephemeral (tenants from `cuslice run`
//     flags, no file); others answer kUnsupported, on either socket. Control socket only.
//     Adds the tenant, or accepts it when one of that name has the same parameters. On
//     success the connection becomes a *lease*: the client keeps it open (across exec) for
//     as long as the command it starts lives, and an ephemeral daemon that exits when idle
//     counts it as a client. Whatever arrives on a lease later is read as a kick: whoever
//     inherits it (the command, a tenant) can make no further request on it.
//
// Plugin requests (cuslice-device-plugin and cuslice-dra-plugin, for Kubernetes) are a third kind of
// first message, a PluginRequest, told apart by its own magic and versioned on its own, and
// accepted on the control socket only:
//   - kApply: create the plugin tenant `tenant.name`, or update its share, cap and labels
//     (memory, GPUs and credential are fixed at creation). Answered by a ControlReply.
//   - kRemove: remove it (kept, retired, until its processes exit). Answered by a ControlReply.
//   - kList: every plugin tenant, credentials included. Answered by a PluginList, or by a
//     ControlReply when refused.
// A plugin tenant lives in the daemon's memory, beside the file's tenants, until removed or
// the daemon exits; it is joined only with CUSLICE_TENANT=<name>:<key>, the key being the
// credential given at creation, and only from the pod (cgroup) of the first process that
// joined it (docs/reference/kubernetes.md).
//
// The daemon trusts nothing in a message (scheduler/clients/message_decoder.h): sizes and versions
// must match exactly, names must be NUL-terminated in their field and of their kind's
// characters (a tenant name as in the configuration, with `:<key>` for a plugin tenant;
// Kubernetes names in a WorkloadMessage), a declared `charged` above 2^48 bytes is refused.
// Kicks are at most 8 bytes. Anything else closes that connection, and only it. A
// connection must send its first message within 5 s; one uid may hold at most 256
// registered processes and 512 connections, one tenant 256 registered processes. The hook maps the segment only if it belongs to
// the daemon's uid (SO_PEERCRED on its side of the socket).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "protocol/shm_protocol.h"

namespace cuslice::wire {

inline constexpr uint32_t kMagic = 0x43534C43;  // "CLSC"
// Version 2: the reply carries the tenant region; the segment is read-only for hooks.
inline constexpr uint16_t kVersion = 2;
inline constexpr const char* kDefaultSocketPath = "/run/cuslice/cuslice.sock";
inline constexpr const char* kSocketEnv = "CUSLICE_SOCKET";
inline constexpr const char* kTenantEnv = "CUSLICE_TENANT";

// The three words every message but BlockerClaim starts with, which a reader checks before
// it knows the message: its protocol's magic, its version, and its size in bytes.
#define CUSLICE_WIRE_HEADER(Message, magic_value, version_value) \
  uint32_t magic = magic_value;                                  \
  uint16_t version = version_value;                              \
  uint16_t size = sizeof(Message)

struct RegisterRequest {
  CUSLICE_WIRE_HEADER(RegisterRequest, kMagic, kVersion);
  // CUSLICE_TENANT, NUL-terminated; empty: let the daemon's match rules decide.
  char tenant[shm::kNameSize] = {};
  // Bytes this process already holds per GPU: non-zero when it registers again after the
  // daemon restarted, so the new daemon charges them to the tenant.
  uint64_t charged[shm::kMaxGpus] = {};
};

// Sent by a registered hook right after the reply, when its environment names the
// Kubernetes workload it runs in (CUSLICE_POD_NAMESPACE, CUSLICE_POD_NAME,
// CUSLICE_CONTAINER_NAME: the pod's downward API, see deploy/). The daemon uses it only for
// the `namespace`/`pod`/`container` labels of the tenant's metrics. A separate message, not
// a longer RegisterRequest, so that either side may be older: a daemon that does not know it
// reads it as a kick, which costs one scheduling step.
inline constexpr uint32_t kWorkloadMagic = 0x4B574C43;  // "CLWK"
inline constexpr const char* kPodNamespaceEnv = "CUSLICE_POD_NAMESPACE";
inline constexpr const char* kPodNameEnv = "CUSLICE_POD_NAME";
inline constexpr const char* kContainerNameEnv = "CUSLICE_CONTAINER_NAME";

struct WorkloadMessage {
  CUSLICE_WIRE_HEADER(WorkloadMessage, kWorkloadMagic, kVersion);
  // Each NUL-terminated, empty when unknown. Kubernetes allows 63 characters for a namespace
  // and a container name, 253 for a pod name.
  char pod_namespace[64] = {};
  char pod_name[256] = {};
  char container_name[64] = {};
};

// Sent by a registered hook when the driver refused an allocation its tenant's quota allowed
// (the card is full) and the segment's allocation_wait_ns is non-zero: memory preemption
// (docs/design/preemption.md). The daemon may suspend preemptible tenants of lower priority to make
// room; it answers in the process's slot (shm::ProcessSlot::memory_decision, with `sequence`),
// once memory was freed or when nothing will be. The hook waits at most allocation_wait_ns
// from its first request for one allocation. A daemon that does not know the message reads it
// as a kick.
inline constexpr uint32_t kMemoryMagic = 0x4D4D4C43;  // "CLMM"

struct MemoryRequest {
  CUSLICE_WIRE_HEADER(MemoryRequest, kMemoryMagic, kVersion);
  uint32_t gpu = 0;       // the scheduler's GPU index
  uint32_t sequence = 0;  // 1 to 2^24 - 1, then wraps; echoed in memory_decision
  uint64_t bytes = 0;       // the allocation that did not fit
  uint64_t free_bytes = 0;  // the card's free memory, as the driver reported it just before
};

// Sent by a registered hook when its process first uses what the driver's checkpoint cannot
// move (shm::kUsesIpc, kUsesManaged, kUsesMps), and again after it registers anew: memory
// preemption then stops the process rather than checkpointing it. The daemon takes the claim
// from this connection only, for the process registered on it, so a process can make it for
// itself and for no other (the region's ProcessUse::checkpoint_flags, which any process of
// the tenant can write, is not read). Eight bytes: a daemon that does not know it reads it as
// a kick.
inline constexpr uint32_t kBlockerMagic = 0x4B424C43;  // "CLBK"

struct BlockerClaim {
  uint32_t magic = kBlockerMagic;
  uint32_t flags = 0;  // shm::kUses*; unknown bits are ignored
};
static_assert(sizeof(BlockerClaim) == 8, "read as a kick by a daemon that does not know it");

enum class RegisterStatus : int32_t {
  kOk = 0,
  kRefused = 1,          // no tenant for this process, or registration on the control socket
                         // (message says why); do not retry
  kFull = 2,             // no free process slot; retry later
  kBadRequest = 3,       // malformed request
  kVersionMismatch = 4,  // message or segment version not supported
};

struct RegisterReply {
  CUSLICE_WIRE_HEADER(RegisterReply, kMagic, kVersion);
  RegisterStatus status = RegisterStatus::kBadRequest;
  uint32_t slot = 0;             // index into Segment::processes and TenantRegion::processes
  uint32_t tenant = 0;           // index into Segment::tenants
  // kJoinMps: the process connects to the scheduler's MPS control daemon before cuInit, with
  // its tenant's settings (shm_spatial.h). 0 from a daemon without spatial GPUs (or older:
  // the field was reserved and zero).
  uint32_t flags = 0;
  static constexpr uint32_t kJoinMps = 1u << 0;
  uint64_t slot_generation = 0;  // ProcessSlot::generation at registration
  uint64_t segment_generation = 0;  // Segment::generation
  char shm_name[shm::kNameSize] = {};  // for shm_open, e.g. "/cuslice"
  char message[256] = {};        // human-readable reason when status != kOk
};

inline constexpr uint32_t kControlMagic = 0x54434C43;  // "CLCT"
inline constexpr uint16_t kControlVersion = 2;

enum class ControlCommand : uint32_t {
  kDescribe = 1,
  kReload = 2,
  kEnsureTenant = 3,
  kWorkloads = 4,
  // Memory preemption's state, for `cuslice status`: the reply's message holds one line per
  // tenant that is not simply running, `name<TAB>state<TAB>reason`. Open to every uid.
  kPreemption = 5,
};

// A tenant as `cuslice run` describes it (kEnsureTenant). Same meaning as the YAML keys.
struct TenantSpec {
  char name[shm::kNameSize] = {};  // NUL-terminated; the YAML's rules for names
  uint32_t priority = 1;           // 0 low, 1 normal, 2 high
  uint32_t share_ppm = 0;          // 0: no explicit share (split what others leave)
  uint32_t limit_ppm = 1'000'000;  // 1'000'000: uncapped
  uint32_t memory_ppm = 0;         // per-GPU quota as millionths of the card, or 0
  uint64_t memory_bytes = 0;       // per-GPU quota in bytes, or 0 (both 0: no quota)
  uint32_t gpu_mask = 0;           // bit g: the tenant uses GPU g (NVML index); 0: every GPU
  uint32_t reserved0 = 0;
};

struct ControlRequest {
  CUSLICE_WIRE_HEADER(ControlRequest, kControlMagic, kControlVersion);
  ControlCommand command = ControlCommand::kDescribe;
  uint32_t reserved0 = 0;
  TenantSpec tenant;  // kEnsureTenant only
};

enum class ControlStatus : int32_t {
  kOk = 0,
  kFailed = 1,           // reload: the file has errors (message lists them, one a line);
                         // ensure: the tenant cannot be added (message says why)
  kUnsupported = 2,      // not in this daemon's mode (reload of an ephemeral daemon, ...)
  kForbidden = 3,        // the peer's uid may not do this, or not on this socket (the tenant
                         // socket: message names the control socket)
  kBadRequest = 4,       // malformed request
  kVersionMismatch = 5,  // control version not supported
};

struct ControlReply {
  CUSLICE_WIRE_HEADER(ControlReply, kControlMagic, kControlVersion);
  ControlStatus status = ControlStatus::kBadRequest;
  int32_t daemon_pid = 0;  // in the daemon's pid namespace
  uint32_t flags = 0;      // shm::Segment::kEphemeral when tenants come from `cuslice run`
  uint32_t tenants = 0;    // tenants in the configuration now
  char shm_name[shm::kNameSize] = {};
  char config_path[512] = {};  // empty for an ephemeral daemon
  // What happened, for people: on kReload's kFailed, one configuration error per line
  // (`file:line:column: message`), cut short with a final "..." line when they do not fit.
  char message[8192] = {};
};

// kWorkloads' answer: tenants by name with their workload. Strings NUL-terminated.
struct TenantWorkload {
  char tenant[shm::kNameSize] = {};
  char pod_namespace[64] = {};
  char pod_name[256] = {};
  char container_name[64] = {};
};

struct WorkloadList {
  CUSLICE_WIRE_HEADER(WorkloadList, kControlMagic, kControlVersion);
  ControlStatus status = ControlStatus::kOk;
  uint32_t count = 0;  // entries of `tenants` used
  TenantWorkload tenants[shm::kMaxTenants];
};

inline constexpr uint32_t kPluginMagic = 0x50434C43;  // "CLCP"
// Version 2: PluginTenant::gpu_mask (a tenant on several GPUs, for the DRA driver's claims).
inline constexpr uint16_t kPluginVersion = 2;
// Separates a plugin tenant's name from its credential in CUSLICE_TENANT: never part of a
// tenant name (valid_tenant_name).
inline constexpr char kTenantKeySeparator = ':';
// The memory device IDs (GiB units) a plugin tenant holds, as a bitmap: units 0 to 511.
inline constexpr uint32_t kMaxPluginUnits = 512;

enum class PluginCommand : uint32_t {
  kApply = 1,
  kRemove = 2,
  kList = 3,
};

// A tenant the device plugin made for one container, or the DRA driver for one claim.
// Strings NUL-terminated.
struct PluginTenant {
  char name[shm::kNameSize] = {};  // the tenant's name; the YAML's rules for names
  char key[64] = {};               // credential: 16 to 63 characters, never in the segment
  uint32_t gpu = 0;                // the GPU its memory is on (NVML index on the node)
  uint32_t priority = 1;           // 0 low, 1 normal, 2 high
  uint32_t share_ppm = 0;          // share of its GPU under contention, [0, 1e6]; 0: what the GPU's
                                   // explicit shares leave, split (a container of memory only)
  uint32_t limit_ppm = 1'000'000;  // cap; 1e6: uncapped
  uint64_t memory_bytes = 0;       // memory quota on its GPU, > 0
  char gpu_uuid[48] = {};          // for people (status, logs)
  // The plugin's record of which memory IDs the tenant holds (bit u: unit u), kept for it
  // so that a restarted plugin finds its allocations here.
  uint64_t units[kMaxPluginUnits / 64] = {};
  // The Kubernetes workload (from the kubelet's PodResources): labels of the tenant's
  // metrics; empty until the plugin has seen the pod.
  char pod_namespace[64] = {};
  char pod_name[256] = {};
  char container_name[64] = {};
  // Every GPU the tenant is on (bit g: GPU g), `gpu` among them; its memory quota, share and
  // cap hold on each. 0: `gpu` alone (the device plugin's tenants).
  uint32_t gpu_mask = 0;
  uint32_t reserved0 = 0;
};

struct PluginRequest {
  CUSLICE_WIRE_HEADER(PluginRequest, kPluginMagic, kPluginVersion);
  PluginCommand command = PluginCommand::kList;
  uint32_t reserved0 = 0;
  PluginTenant tenant;  // kApply: all of it; kRemove: the name; kList: nothing
};

struct PluginList {
  CUSLICE_WIRE_HEADER(PluginList, kPluginMagic, kPluginVersion);
  ControlStatus status = ControlStatus::kBadRequest;
  uint32_t count = 0;  // entries of `tenants` used
  char message[256] = {};
  PluginTenant tenants[shm::kMaxTenants];
};

static_assert(std::is_trivially_copyable_v<WorkloadMessage> && sizeof(WorkloadMessage) == 392);
static_assert(std::is_trivially_copyable_v<PluginRequest> && std::is_trivially_copyable_v<PluginList>);
static_assert(std::is_trivially_copyable_v<WorkloadList> && sizeof(WorkloadList) != sizeof(ControlReply));
static_assert(sizeof(PluginTenant) == 64 + 64 + 16 + 8 + 48 + 64 + 64 + 256 + 64 + 8);
static_assert(offsetof(PluginRequest, magic) == 0 && offsetof(PluginRequest, tenant) == 16);
static_assert(std::is_trivially_copyable_v<MemoryRequest> && sizeof(MemoryRequest) == 32);
static_assert(std::is_trivially_copyable_v<RegisterRequest>);
static_assert(std::is_trivially_copyable_v<RegisterReply>);
static_assert(sizeof(RegisterRequest) == 8 + 64 + 8 * shm::kMaxGpus);
static_assert(sizeof(RegisterReply) == 8 + 16 + 16 + 64 + 256);
static_assert(std::is_trivially_copyable_v<ControlRequest>);
static_assert(std::is_trivially_copyable_v<ControlReply>);
static_assert(sizeof(TenantSpec) == 64 + 16 + 8 + 8 && sizeof(ControlRequest) == 16 + sizeof(TenantSpec));
// The daemon reads a connection's first message into one buffer and dispatches on magic.
static_assert(offsetof(RegisterRequest, magic) == 0 && offsetof(ControlRequest, magic) == 0);

#undef CUSLICE_WIRE_HEADER

}  // namespace cuslice::wire
