// The version `cuslice version` and `cuslice --version` print, set by CMake from project(),
// with the protocols this build speaks.
#pragma once

#include <string>

namespace cuslice::cli {

inline constexpr const char* kVersion = CUSLICE_VERSION;

// "cuslice 0.1.0", then the shared segment's ABI (shm::kAbiMajor.kAbiMinor: a segment of the
// same major is readable) and the socket protocol's versions (wire::kVersion for hooks'
// registration, wire::kControlVersion for `cuslice`'s requests), one a line.
std::string version_text();

}  // namespace cuslice::cli
