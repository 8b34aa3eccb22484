/* Preloaded into cuslice-scheduler, makes this kernel answer SO_PEERPIDFD as Linux 6.5 to
 * 6.17 do: no pidfd (EINVAL) for a peer that has exited and been reaped. Linux 6.18 hands out
 * a pidfd of the dead process instead (its fdinfo says "Pid: -1"); this turns that into the
 * older answer, so that test_socket_attacks.py can check the scheduler on both kinds of
 * kernel. Everything else goes to libc unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* The pid the pidfd's fdinfo shows: -1 once its process was reaped; 0 when unreadable. */
static int pidfd_pid(int pidfd) {
  char path[64], line[256];
  int pid = 0;
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
  FILE* f = fopen(path, "re");
  if (f == NULL) return 0;
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, "Pid:", 4) == 0) pid = atoi(line + 4);
  fclose(f);
  return pid;
}

int getsockopt(int fd, int level, int name, void* value, socklen_t* length) {
  static int (*real)(int, int, int, void*, socklen_t*);
  if (real == NULL) real = (int (*)(int, int, int, void*, socklen_t*))dlsym(RTLD_NEXT, "getsockopt");
  const int rc = real(fd, level, name, value, length);
  if (rc == 0 && level == SOL_SOCKET && name == SO_PEERPIDFD && *length >= sizeof(int)) {
    int pidfd;
    memcpy(&pidfd, value, sizeof pidfd);
    if (pidfd >= 0 && pidfd_pid(pidfd) == -1) {
      close(pidfd);
      errno = EINVAL;
      return -1;
    }
  }
  return rc;
}
