// Unsigned arithmetic that stops at the ends instead of wrapping: for byte counts that come
// from other processes (a tenant's region) or add up allowances, where a wrapped sum would
// turn "too much" into "almost nothing". Header-only and constexpr (the hook includes it).
#pragma once

#include <cstdint>

namespace cuslice {

constexpr uint64_t saturating_add(uint64_t a, uint64_t b) noexcept { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace cuslice
