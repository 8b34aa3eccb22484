// Memory sizes as people write them: "4GiB", "4096MiB", "1.5GB", "25%".
//
// Shared by the hook (CUSLICE_MEMORY_LIMIT) and the daemon's YAML, so both accept exactly the
// same spellings. No allocation and no exceptions: the hook parses while the application is
// starting up.
#pragma once

#include <cstdint>
#include <string_view>

namespace cuslice {

struct SizeSpec {
  enum class Kind { kBytes, kPercent };
  Kind kind = Kind::kBytes;
  uint64_t bytes = 0;     // when kind == kBytes
  double percent = 0.0;   // when kind == kPercent: (0, 100]

  // The byte count this spec means on a device of `device_total` bytes.
  uint64_t resolve(uint64_t device_total) const;
};

// Parses a size: a non-negative number (decimals allowed) followed by a unit (B, KB, MB, GB,
// TB powers of 1000; KiB, MiB, GiB, TiB powers of 1024; case-insensitive; a bare number means
// bytes) or by '%'. Surrounding spaces are ignored. On failure returns false and sets *why to
// a static string describing what is wrong.
bool parse_size(std::string_view text, SizeSpec& out, const char** why);

}  // namespace cuslice
