// The oldest glibc libcuslice.so runs on: 2.28 (RHEL 8, Debian 10, Ubuntu 20.04 and every
// newer one). The hook is preloaded into other people's programs, often through a container's
// /etc/ld.so.preload, where a library that needs a newer glibc stops every program from
// starting. Force-included (-include) into every file of the hook and of the scheduler client
// it links; tests/hook/check_glibc_baseline.py fails the tests when a newer version appears.
//
// How: the linker binds a call to the newest (default) version of a symbol in the glibc it
// links against. Since 2.32-2.34 glibc has moved libpthread's, libdl's and librt's functions
// into libc.so.6 under new version names, keeping the old names beside them as the same code.
// Each line below binds one such call to its old name, which every glibc from 2.28 on has (in
// libpthread.so.0, libdl.so.2 or librt.so.1 up to 2.33, which the hook therefore names as
// dependencies; from 2.34 on those are empty and load for nothing). A call through an old name
// is the same direct call to the same function: nothing is added on any path.
//
// To call a glibc function whose default version is newer than 2.28 (objdump -T shows it, and
// the test names it): add its line here if glibc keeps an older name for it; otherwise give the
// hook its own definition in terms of older ones, as glibc_baseline.cpp does for fstat.
//
// .symver applies to the object file it is assembled in: with link-time optimisation the hook
// is compiled as one partition (hook/CMakeLists.txt), so that these lines reach every call.
#pragma once

#include <features.h>  // __GLIBC__: this header comes before any other

#if defined(__x86_64__) && defined(__GLIBC__)
// libdl.so.2 up to glibc 2.33
__asm__(".symver dlopen, dlopen@GLIBC_2.2.5");
__asm__(".symver dlerror, dlerror@GLIBC_2.2.5");
// libpthread.so.0 up to glibc 2.33 (pthread_sigmask up to 2.31)
__asm__(".symver pthread_create, pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_once, pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_setname_np, pthread_setname_np@GLIBC_2.12");
__asm__(".symver pthread_sigmask, pthread_sigmask@GLIBC_2.2.5");
// librt.so.1 up to glibc 2.33
__asm__(".symver shm_open, shm_open@GLIBC_2.2.5");
#endif
