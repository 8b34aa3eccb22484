// Adding the hook to LD_PRELOAD without disturbing what is already there.
//
// ld.so(8) reads LD_PRELOAD as a list of objects separated by spaces or colons and loads them
// in that order. Tools such as jemalloc, profilers and sanitizer runtimes put themselves
// there too, so cuslice appends rather than replaces. It never adds a second libcuslice.so:
// two copies of the interposer would each count the same allocations against the quota.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace cuslice::cli {

// True if an entry of `preload` is a file named libcuslice.so, in any directory.
bool preload_has_hook(std::string_view preload);

// `current` with `hook` appended after a ':', or `current` unchanged if it already has a
// libcuslice.so. Existing entries and separators are kept byte for byte. Throws Error if
// `hook` contains a space or a colon, which ld.so would split into two entries.
std::string append_hook_to_preload(std::string_view current, const std::filesystem::path& hook);

}  // namespace cuslice::cli
