// The kubelet's PodResources API (v1 List): which container holds which device IDs of the
// plugin's two resources. The only place the plugin learns pods and containers: the
// kubelet's Allocate calls carry device IDs only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "device_plugin/ledger.h"

namespace cuslice::device_plugin {

// Every container holding IDs of cuslice.io/gpu-memory or cuslice.io/gpu-compute; nullopt
// with `why` when the kubelet does not answer on `socket_path`.
std::optional<std::vector<Holding>> list_holdings(const std::string& socket_path, std::string& why);

}  // namespace cuslice::device_plugin
