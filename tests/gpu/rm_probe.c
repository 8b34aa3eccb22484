/* Diagnostic preload for tests/gpu/smi_filter.sh --diagnose: logs every NVIDIA resource-manager
 * (RM) control ioctl a process makes, to learn which controls nvidia-smi uses for its process
 * list if it is not NV2080_CTRL_CMD_GPU_GET_PIDS (0x2080018d).
 *
 *   gcc -O2 -shared -fPIC -o rm_probe.so tests/gpu/rm_probe.c -ldl
 *   RM_PROBE_LOG=/tmp/rm.log LD_PRELOAD=.../libcuslice.so:./rm_probe.so nvidia-smi
 *
 * One line per ioctl of NVIDIA's 'F' type, written after the call returned:
 *   rm cmd=0x2080018d size=3812 flags=0x0 status=0x0 ret=0 via=direct [pids n=3: 1 2 3]
 *   esc nr=0xd2 size=72 ret=0                      (other escapes: nr and _IOC_SIZE)
 * and at exit "total ioctls=N F=N rm=N". Preloaded after libcuslice.so it sees what the kernel
 * answered (before the hook filters it); before the hook, what the application is shown.
 * Layouts: hook/base/nvidia_rm_abi.h (from NVIDIA's open-gpu-kernel-modules headers). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

struct xfer { uint32_t cmd, size; uint64_t ptr; };                /* nv_ioctl_xfer_t */
struct control {                                                  /* NVOS54_PARAMETERS */
  uint32_t hClient, hObject, cmd, flags;
  uint64_t params;
  uint32_t paramsSize, status;
};
_Static_assert(sizeof(struct xfer) == 16 && sizeof(struct control) == 32, "RM ABI");

#define ESC_RM_CONTROL 0x2Au
#define ESC_XFER (200u + 11u)
#define CMD_GET_PIDS 0x2080018du

static int (*next_ioctl)(int, unsigned long, ...);
static int log_fd = 2;
static unsigned long n_total, n_f, n_rm;

__attribute__((constructor)) static void open_log(void) {
  const char *path = getenv("RM_PROBE_LOG");
  if (path && *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) log_fd = fd;
  }
}

__attribute__((destructor)) static void summary(void) {
  dprintf(log_fd, "total ioctls=%lu F=%lu rm=%lu pid=%d\n", n_total, n_f, n_rm, (int)getpid());
}

static void log_control(const struct control *c, int ret, const char *via) {
  char line[512];
  int len = snprintf(line, sizeof line, "rm cmd=0x%08x size=%u flags=0x%x status=0x%x ret=%d via=%s",
                     c->cmd, c->paramsSize, c->flags, c->status, ret, via);
  if (c->cmd == CMD_GET_PIDS && ret == 0 && c->status == 0 && c->params && c->paramsSize >= 12) {
    const uint32_t *p = (const uint32_t *)(uintptr_t)c->params;
    uint32_t n = p[2], room = (c->paramsSize - 12) / 4, shown = n < room ? n : room;
    len += snprintf(line + len, sizeof line - len, " idType=%u id=0x%x pids n=%u:", p[0], p[1], n);
    for (uint32_t i = 0; i < shown && i < 16 && len < (int)sizeof line - 16; ++i)
      len += snprintf(line + len, sizeof line - len, " %u", p[3 + i]);
  }
  if (len > (int)sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  if (write(log_fd, line, len) < 0) { /* nothing to do */ }
}

int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (!next_ioctl) next_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
  int ret = next_ioctl ? next_ioctl(fd, request, arg) : (int)syscall(SYS_ioctl, fd, request, arg);
  __atomic_add_fetch(&n_total, 1, __ATOMIC_RELAXED);
  if (_IOC_TYPE(request) != 'F' || arg == NULL) return ret;
  __atomic_add_fetch(&n_f, 1, __ATOMIC_RELAXED);
  unsigned nr = _IOC_NR(request), size = _IOC_SIZE(request);
  if (nr == ESC_RM_CONTROL && size == sizeof(struct control)) {
    __atomic_add_fetch(&n_rm, 1, __ATOMIC_RELAXED);
    log_control((const struct control *)arg, ret, "direct");
  } else if (nr == ESC_XFER && size == sizeof(struct xfer)) {
    const struct xfer *x = (const struct xfer *)arg;
    if (x->cmd == ESC_RM_CONTROL && x->size == sizeof(struct control) && x->ptr) {
      __atomic_add_fetch(&n_rm, 1, __ATOMIC_RELAXED);
      log_control((const struct control *)(uintptr_t)x->ptr, ret, "xfer");
    } else {
      dprintf(log_fd, "esc nr=0x%x size=%u ret=%d via=xfer\n", x->cmd, x->size, ret);
    }
  } else {
    dprintf(log_fd, "esc nr=0x%x size=%u ret=%d\n", nr, size, ret);
  }
  return ret;
}
