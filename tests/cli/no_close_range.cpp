// close_range as a kernel older than 5.9 answers it (ENOSYS), preloaded into `cuslice` so that
// a test sees the auto-started scheduler inherit no descriptor on such a kernel either.
#include <cerrno>

extern "C" int close_range(unsigned int, unsigned int, int) {
  errno = ENOSYS;
  return -1;
}
