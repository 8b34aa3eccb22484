// The version `cuslice version` and `cuslice --version` print, set by CMake from project().
#pragma once

namespace cuslice::cli {

inline constexpr const char* kVersion = CUSLICE_VERSION;

}  // namespace cuslice::cli
