// Kubernetes resource quantities ("8Gi", "256Mi", "30", "1.5G", "500m"), as the API server
// writes a device's capacity and a claim's consumedCapacity: read into whole units, and
// written in the API server's canonical form for whole binary or decimal amounts.
//
// Pure; no allocation beyond the returned string, no exceptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cuslice::dra {

// The amount `text` stands for, rounded up to a whole unit (the API server rounds
// consumption up, never down); nullopt when `text` is not a quantity, is negative, or does
// not fit 63 bits.
std::optional<uint64_t> parse_quantity(std::string_view text);

// `value` with the largest binary suffix (Ki to Ei) that divides it, else as a plain number:
// 8589934592 -> "8Gi", 100 -> "100".
std::string binary_quantity(uint64_t value);

}  // namespace cuslice::dra
