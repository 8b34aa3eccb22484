/* Helper of test_doors.cpp: A and B both define probe_symbol; A looks up the next one. */
#define _GNU_SOURCE
#include <dlfcn.h>

char probe_symbol(void) { return 'A'; }

char probe_which(void) {
  char (*next)(void) = (char (*)(void))dlsym(RTLD_NEXT, "probe_symbol");
  return next ? next() : '?';
}
