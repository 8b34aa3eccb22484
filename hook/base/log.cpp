#include "hook/base/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace cuslice::log {

Level g_level = Level::kError;

void write(Level l, const char* fmt, ...) {
  static const char* const kNames[] = {"off", "error", "warning", "info", "debug"};
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "cuslice[%d] %s: ", static_cast<int>(getpid()),
                        kNames[static_cast<int>(l)]);
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, buf, len);
  (void)ignored;
}

}  // namespace cuslice::log
