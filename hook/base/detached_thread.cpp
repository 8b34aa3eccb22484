// Starting the hook's own threads (detached_thread.h). Calls libc only.
#include "hook/base/detached_thread.h"

#include <pthread.h>

namespace cuslice {

bool start_detached_thread(void* (*body)(void*), const char* name) noexcept {
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const bool started = pthread_create(&t, &attr, body, nullptr) == 0;
  pthread_attr_destroy(&attr);
  if (started) pthread_setname_np(t, name);
  return started;
}

}  // namespace cuslice
