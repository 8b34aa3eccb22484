# Building on a glibc older than 2.34 (the release tarball is built on Debian 11, glibc 2.31, so
# that it runs on Ubuntu 20.04 and later). glibc 2.34 moved librt into libc and added
# close_range: on an older one every target links librt, and every C++ file sees
# cmake/glibc_compat.h. On glibc 2.34 and later this changes nothing.
include(CheckCSourceCompiles)
check_c_source_compiles("
#include <features.h>
#if !defined(__GLIBC__) || __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34)
#error not an older glibc
#endif
int main(void) { return 0; }" CUSLICE_GLIBC_BEFORE_2_34)
if(CUSLICE_GLIBC_BEFORE_2_34)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:SHELL:-include ${CMAKE_CURRENT_LIST_DIR}/glibc_compat.h>")
  link_libraries(rt)
endif()
