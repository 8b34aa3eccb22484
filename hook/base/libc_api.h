// The libc functions the hook wraps (hooked_symbols.def, CUSLICE_LIBC_HOOK), with glibc's
// own declarations and the ABI typedef each definition is checked against (symbols.cpp).
#pragma once

#include <sys/ioctl.h>

// glibc: `int ioctl(int, unsigned long, ...) __THROW`, which is noexcept in C++. The third
// argument, when there is one, is read as a pointer (as glibc's own ioctl reads it).
using PFN_ioctl = int (*)(int fd, unsigned long request, ...) noexcept;
