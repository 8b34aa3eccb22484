#include "scheduler/clients/message_decoder.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "config/tenant_config.h"

namespace cuslice {
namespace {

// The header every message of the protocol starts with.
struct Header {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t size = 0;
};
static_assert(offsetof(wire::RegisterRequest, size) + sizeof(uint16_t) == sizeof(Header));
static_assert(offsetof(wire::ControlRequest, size) + sizeof(uint16_t) == sizeof(Header));
static_assert(offsetof(wire::WorkloadMessage, size) + sizeof(uint16_t) == sizeof(Header));
static_assert(offsetof(wire::PluginRequest, size) + sizeof(uint16_t) == sizeof(Header));
static_assert(offsetof(wire::MemoryRequest, size) + sizeof(uint16_t) == sizeof(Header));
static_assert(sizeof(wire::MemoryRequest) > kMaxKickBytes && sizeof(wire::MemoryRequest) != sizeof(wire::WorkloadMessage));

// A device plugin credential's characters (scheduler/tenants/plugin_tenants.h decides the rest).
bool key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

template <size_t N>
std::optional<std::string_view> terminated(const char (&field)[N]) {
  const size_t length = strnlen(field, N);
  if (length == N) return std::nullopt;
  return std::string_view(field, length);
}

FirstMessage refusal(FirstMessage::Kind kind, std::string why) {
  FirstMessage m;
  m.kind = kind;
  m.why = std::move(why);
  return m;
}

FirstMessage refuse_register(wire::RegisterStatus status, std::string why) {
  FirstMessage m = refusal(FirstMessage::Kind::kRefuseRegister, std::move(why));
  m.register_status = status;
  return m;
}

FirstMessage refuse_control(wire::ControlStatus status, std::string why) {
  FirstMessage m = refusal(FirstMessage::Kind::kRefuseControl, std::move(why));
  m.control_status = status;
  return m;
}

FirstMessage decode_register(const Header& h, const void* bytes, size_t n) {
  if (h.version != wire::kVersion) {
    return refuse_register(wire::RegisterStatus::kVersionMismatch,
                           "protocol version " + std::to_string(h.version) + " is not supported (the scheduler speaks " +
                               std::to_string(wire::kVersion) + ")");
  }
  if (n != sizeof(wire::RegisterRequest) || h.size != sizeof(wire::RegisterRequest)) {
    return refuse_register(wire::RegisterStatus::kBadRequest,
                           "malformed registration: " + std::to_string(n) + " bytes, expected " +
                               std::to_string(sizeof(wire::RegisterRequest)));
  }
  FirstMessage m;
  std::memcpy(&m.reg, bytes, sizeof m.reg);
  const std::optional<std::string_view> tenant = terminated(m.reg.tenant);
  if (!tenant) return refuse_register(wire::RegisterStatus::kBadRequest, "malformed registration: tenant name not terminated");
  // A name, or a device plugin tenant's name:key. Refused, not "bad request": the hook then
  // stops asking, as for an unknown tenant. The key is a credential: never quoted.
  const size_t colon = tenant->find(wire::kTenantKeySeparator);
  const std::string_view name = tenant->substr(0, colon);
  const std::string_view key = colon == std::string_view::npos ? std::string_view{} : tenant->substr(colon + 1);
  if (!tenant->empty() && (!valid_tenant_name(name) || !std::all_of(key.begin(), key.end(), key_char))) {
    return refuse_register(wire::RegisterStatus::kRefused,
                           "CUSLICE_TENANT `" + excerpt(name) + "`" + (colon != std::string_view::npos ? ":<key>" : "") +
                               " is not a tenant name (1 to " + std::to_string(kMaxTenantNameLength) +
                               " letters, digits, '-', '_' or '.', and for a device plugin tenant ':' and its key)");
  }
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    if (m.reg.charged[g] > kMaxDeclaredChargeBytes) {
      return refuse_register(wire::RegisterStatus::kBadRequest,
                             "malformed registration: " + std::to_string(m.reg.charged[g]) + " bytes declared on GPU " +
                                 std::to_string(g));
    }
  }
  m.kind = FirstMessage::Kind::kRegister;
  return m;
}

// The refusal of a control socket request of a version or size other than `Request`'s at
// `version`, the one this scheduler speaks; nullopt for one it speaks. Another version may
// have another size: its version number is all that is read.
template <typename Request>
std::optional<FirstMessage> refuse_unspoken(const char* protocol, uint16_t version, const Header& h, size_t n) {
  if (h.version == version && n == sizeof(Request) && h.size == sizeof(Request)) return std::nullopt;
  return refuse_control(wire::ControlStatus::kVersionMismatch,
                        std::string(protocol) + " protocol version " + std::to_string(h.version) + " (" +
                            std::to_string(n) + " bytes) is not supported (the scheduler speaks " +
                            std::to_string(version) + ", " + std::to_string(sizeof(Request)) + " bytes)");
}

FirstMessage decode_control(const Header& h, const void* bytes, size_t n) {
  if (auto refusal = refuse_unspoken<wire::ControlRequest>("control", wire::kControlVersion, h, n)) return *refusal;
  FirstMessage m;
  std::memcpy(&m.control, bytes, sizeof m.control);
  switch (m.control.command) {
    case wire::ControlCommand::kDescribe:
    case wire::ControlCommand::kReload:
    case wire::ControlCommand::kWorkloads:
    case wire::ControlCommand::kPreemption:
      break;
    case wire::ControlCommand::kEnsureTenant:
      if (!terminated(m.control.tenant.name))
        return refuse_control(wire::ControlStatus::kBadRequest, "malformed request: tenant name not terminated");
      break;
    default:
      return refuse_control(wire::ControlStatus::kBadRequest, "unknown control command");
  }
  m.kind = FirstMessage::Kind::kControl;
  return m;
}

FirstMessage decode_plugin(const Header& h, const void* bytes, size_t n) {
  if (auto refusal = refuse_unspoken<wire::PluginRequest>("plugin", wire::kPluginVersion, h, n)) return *refusal;
  FirstMessage m;
  std::memcpy(&m.plugin, bytes, sizeof m.plugin);
  const wire::PluginCommand command = m.plugin.command;
  if (command != wire::PluginCommand::kApply && command != wire::PluginCommand::kRemove &&
      command != wire::PluginCommand::kList)
    return refuse_control(wire::ControlStatus::kBadRequest, "unknown plugin command");
  const wire::PluginTenant& t = m.plugin.tenant;
  if (!terminated(t.name) || !terminated(t.key) || !terminated(t.gpu_uuid) || !terminated(t.pod_namespace) ||
      !terminated(t.pod_name) || !terminated(t.container_name))
    return refuse_control(wire::ControlStatus::kBadRequest, "malformed plugin request: a string is not terminated");
  m.kind = FirstMessage::Kind::kPlugin;
  return m;
}

bool kubernetes_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

}  // namespace

bool valid_kubernetes_name(std::string_view name, size_t max) {
  return name.size() <= max && std::all_of(name.begin(), name.end(), kubernetes_char);
}

FirstMessage decode_first_message(const void* bytes, size_t n) {
  Header h;
  if (n < sizeof h) return {};  // kDrop
  std::memcpy(&h, bytes, sizeof h);
  if (h.magic == wire::kMagic) return decode_register(h, bytes, n);
  if (h.magic == wire::kControlMagic) return decode_control(h, bytes, n);
  if (h.magic == wire::kPluginMagic) return decode_plugin(h, bytes, n);
  return {};
}

namespace {

// A blocker claim: what the driver's checkpoint cannot move that the process uses.
bool decode_claim(const void* bytes, HookMessage& m) {
  wire::BlockerClaim claim;
  std::memcpy(&claim, bytes, sizeof claim);
  if (claim.magic != wire::kBlockerMagic) return false;
  m.kind = HookMessage::Kind::kClaim;
  m.claim = claim.flags & (shm::kUsesIpc | shm::kUsesManaged | shm::kUsesMps);
  return true;
}

void decode_memory(const void* bytes, HookMessage& m) {
  std::memcpy(&m.memory, bytes, sizeof m.memory);
  if (m.memory.magic != wire::kMemoryMagic || m.memory.size != sizeof m.memory) {
    m.why = "malformed message: not a memory request";
    return;
  }
  // Another version's request: none, as from an older hook (it then waits its deadline).
  m.kind = m.memory.version == wire::kVersion ? HookMessage::Kind::kMemory : HookMessage::Kind::kKick;
}

void decode_workload(const void* bytes, HookMessage& m) {
  wire::WorkloadMessage w;
  std::memcpy(&w, bytes, sizeof w);
  if (w.magic != wire::kWorkloadMagic || w.size != sizeof w) {
    m.why = "malformed message: not a workload message";
    return;
  }
  if (w.version != wire::kVersion) {
    m.kind = HookMessage::Kind::kKick;  // another version's labels: none, as from an older hook
    return;
  }
  const auto ns = terminated(w.pod_namespace);
  const auto pod = terminated(w.pod_name);
  const auto container = terminated(w.container_name);
  // Kubernetes allows 63 characters for a namespace and a container, 253 for a pod.
  if (!ns || !pod || !container || !valid_kubernetes_name(*ns, 63) || !valid_kubernetes_name(*pod, 253) ||
      !valid_kubernetes_name(*container, 63)) {
    m.why = "malformed workload message: names are not Kubernetes names";
    return;
  }
  m.kind = HookMessage::Kind::kWorkload;
  m.pod_namespace = *ns;
  m.pod_name = *pod;
  m.container_name = *container;
}

}  // namespace

HookMessage decode_hook_message(const void* bytes, size_t n) {
  HookMessage m;
  if (n == sizeof(wire::BlockerClaim) && decode_claim(bytes, m)) return m;
  if (n <= kMaxKickBytes) {
    m.kind = HookMessage::Kind::kKick;
    return m;
  }
  if (n == sizeof(wire::MemoryRequest)) {
    decode_memory(bytes, m);
  } else if (n != sizeof(wire::WorkloadMessage)) {
    m.why = "malformed message: " + std::to_string(n) + " bytes";
  } else {
    decode_workload(bytes, m);
  }
  return m;
}

}  // namespace cuslice
