// What glibc 2.34 added that the programs call, for building them on an older glibc (the release
// tarball is built on Debian 11, glibc 2.31). Force-included into every C++ file by
// cmake/GlibcCompat.cmake, on such a glibc only. Each function does what glibc 2.34's does: one
// system call (which a kernel older than the call fails with ENOSYS, as it fails glibc's).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline int close_range(unsigned int first, unsigned int last, int flags) {
  return (int)syscall(__NR_close_range, first, last, flags);
}

#ifdef __cplusplus
}
#endif
