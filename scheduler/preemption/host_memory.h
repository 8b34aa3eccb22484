// How much memory the host can still give: what a suspension may move out of the GPU.
//
// MemAvailable from /proc/meminfo: the kernel's estimate of memory available for new
// allocations without swapping, page cache it can drop included. The path is a parameter so
// that tests (and containers that mount a different meminfo) can point it elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cuslice {

// The MemAvailable line of meminfo text, in bytes; nothing when it is missing or malformed.
std::optional<uint64_t> parse_mem_available(std::string_view meminfo);

// Reads path (default /proc/meminfo) and parses it; nothing when it cannot be read.
std::optional<uint64_t> read_mem_available(const std::string& path = "/proc/meminfo");

}  // namespace cuslice
