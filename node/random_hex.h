// Hex digits from the kernel's random source, for plugin tenants' names (unique) and
// credentials (secret, node/scheduler_client.h).
#pragma once

#include <cstddef>
#include <string>

namespace cuslice::node {

std::string random_hex(size_t digits);

}  // namespace cuslice::node
