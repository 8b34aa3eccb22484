// The Kubernetes node agents' side of the cuslice-scheduler control socket: create, update, remove
// and list plugin tenants (socket_protocol.h, PluginRequest), and read from the shared
// segment what the scheduler's other tenants (its configuration file's) hold back on each
// GPU. Every request goes to the control socket: the scheduler refuses plugin requests on the
// tenant socket, which containers are given.
//
// One request per connection, as the `cuslice` tool does; every call is bounded by the
// timeout. Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "protocol/socket_protocol.h"

namespace cuslice::node {

struct SchedulerAnswer {
  enum class Kind { kOk, kUnreachable, kRefused };
  Kind kind = Kind::kUnreachable;
  std::string message;  // why, when not kOk
  bool ok() const { return kind == Kind::kOk; }
};

// A tenant the plugin did not make (the scheduler's file, or `cuslice run`) and its quota.
struct OtherTenant {
  std::string name;
  std::optional<uint64_t> memory_bytes;  // per GPU
  std::optional<uint32_t> memory_ppm;    // per GPU, as millionths of the card
  bool unlimited() const { return !memory_bytes && !memory_ppm; }
};

struct SchedulerState {
  pid_t pid = 0;             // changes when the scheduler restarts
  uint64_t generation = 0;   // the segment's; changes with every start
  std::vector<wire::PluginTenant> plugin_tenants;
  std::vector<OtherTenant> other_tenants;  // those that keep memory back (not preemptible)
  uint32_t other_tenant_count = 0;         // every tenant not the plugin's, preemptible or not
  uint32_t spatial_gpus = 0;               // bit g: GPU g runs its tenants side by side
};

class SchedulerClient {
 public:
  // `socket_path`: the scheduler's control socket.
  explicit SchedulerClient(std::string socket_path, int timeout_ms = 5000)
      : socket_path_(std::move(socket_path)), timeout_ms_(timeout_ms) {}

  const std::string& socket_path() const { return socket_path_; }

  SchedulerAnswer apply(const wire::PluginTenant& tenant) const;
  SchedulerAnswer remove(const std::string& name) const;
  // The plugin tenants and, from the segment, the others. nullopt with `why` when the
  // scheduler does not answer or refuses.
  std::optional<SchedulerState> state(std::string& why) const;

 private:
  SchedulerAnswer control(wire::PluginCommand command, const wire::PluginTenant& tenant) const;
  // The parts of state(), in order; each false (nullopt) with `why`.
  // Who the scheduler is (its pid), and the name of its segment.
  std::optional<std::string> describe(SchedulerState& state, std::string& why) const;
  bool list_plugin_tenants(SchedulerState& state, std::string& why) const;
  // The generation and, from the segment, the tenants not the plugin's.
  static bool read_other_tenants(SchedulerState& state, const std::string& shm_name, std::string& why);

  std::string socket_path_;
  int timeout_ms_;
};

}  // namespace cuslice::node
