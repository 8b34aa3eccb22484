/* Helper of hook.early_dlsym: stands in for a sanitizer's runtime. Like ThreadSanitizer's, it
 * wraps dl_iterate_phdr and finds the real one with dlsym(RTLD_NEXT), which reaches the
 * hook's dlsym, possibly before the hook's own constructor has run: from its constructor
 * (preloaded after the hook, it is initialised first) or at its first call, whichever comes
 * first (a sanitizer's runtime, initialised before everything, may call it earlier). A call
 * to the wrapper while that lookup is under way fails the process: the real runtime jumps to
 * address 0 there. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

typedef int (*iterate_fn)(int (*)(struct dl_phdr_info*, size_t, void*), void*);
static iterate_fn real_dl_iterate_phdr;
static volatile int installing; /* read by a call the compiler cannot see */

static void install_interceptors(void) {
  if (real_dl_iterate_phdr != NULL) return;
  installing = 1;
  real_dl_iterate_phdr = (iterate_fn)dlsym(RTLD_NEXT, "dl_iterate_phdr");
  installing = 0;
}

int dl_iterate_phdr(int (*callback)(struct dl_phdr_info*, size_t, void*), void* data) {
  if (installing) {
    static const char message[] =
        "early_dlsym_runtime: dl_iterate_phdr called while its interceptor was being set up\n";
    (void)!write(2, message, sizeof message - 1);
    _exit(86);
  }
  install_interceptors();
  return real_dl_iterate_phdr(callback, data);
}

__attribute__((constructor)) static void initialise(void) { install_interceptors(); }
