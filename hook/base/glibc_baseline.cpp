// The hook's own definitions of the glibc functions it calls whose only name is newer than its
// glibc baseline (glibc_baseline.h), in terms of functions every glibc from 2.28 on exports.
// Hidden, like everything the hook does not export: they replace glibc's for the hook's own
// calls only (the scheduler client's included), never for the application's.
#include <sys/stat.h>

#if !defined(__x86_64__)
#error "the stat version below is x86-64's"
#endif

extern "C" {

// Up to glibc 2.32 <sys/stat.h> compiled fstat into a call of __fxstat with the version of
// struct stat the caller was built with; fstat itself is exported only since 2.33. Every glibc
// still exports __fxstat, so this is the call a program built on 2.28 makes.
int __fxstat(int version, int fd, struct stat* buf) noexcept;
constexpr int kStatVersionLinux = 1;  // _STAT_VER_LINUX, x86-64's struct stat

__attribute__((visibility("hidden"))) int fstat(int fd, struct stat* buf) noexcept {
  return __fxstat(kStatVersionLinux, fd, buf);
}

}  // extern "C"
