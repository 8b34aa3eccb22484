// Fuzz target: the scheduler's decoder of what clients send on its socket
// (scheduler/clients/message_decoder.h), as a connection's first message and as a hook's later one.
// Checks what the daemon relies on: an accepted registration names a tenant that is empty or
// well-formed and declares plausible charges; every reason is one printable line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "config/tenant_config.h"
#include "scheduler/clients/message_decoder.h"

namespace {

void require(bool holds) {
  if (!holds) std::abort();
}

bool one_line(const std::string& s) { return s.find_first_of("\n\r") == std::string::npos && s.size() <= 512; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cuslice;
  const FirstMessage first = decode_first_message(data, size);
  require(one_line(first.why));
  if (first.kind == FirstMessage::Kind::kRegister) {
    require(size == sizeof(wire::RegisterRequest));
    const size_t length = strnlen(first.reg.tenant, sizeof first.reg.tenant);
    require(length < sizeof first.reg.tenant);
    // A name, or a device plugin tenant's name:key.
    const std::string_view requested(first.reg.tenant, length);
    const std::string_view name = requested.substr(0, requested.find(wire::kTenantKeySeparator));
    require(length == 0 || valid_tenant_name(name));
    for (uint64_t charged : first.reg.charged) require(charged <= kMaxDeclaredChargeBytes);
  }
  if (first.kind == FirstMessage::Kind::kControl) require(size == sizeof(wire::ControlRequest));
  if (first.kind == FirstMessage::Kind::kPlugin) {
    require(size == sizeof(wire::PluginRequest));
    require(strnlen(first.plugin.tenant.name, sizeof first.plugin.tenant.name) < sizeof first.plugin.tenant.name);
    require(strnlen(first.plugin.tenant.key, sizeof first.plugin.tenant.key) < sizeof first.plugin.tenant.key);
  }

  const HookMessage later = decode_hook_message(data, size);
  require(one_line(later.why));
  if (later.kind == HookMessage::Kind::kMemory) require(size == sizeof(wire::MemoryRequest));
  if (later.kind == HookMessage::Kind::kWorkload) {
    require(valid_kubernetes_name(later.pod_namespace, 63) && valid_kubernetes_name(later.pod_name, 253) &&
            valid_kubernetes_name(later.container_name, 63));
  }
  return 0;
}
