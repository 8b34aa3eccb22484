// The few functions of the C++ runtime that the hook's compiled code calls, so that
// libcuslice.so links no libstdc++ at all: not the application's (it may have none, or an older
// one), nor a static copy (built against the build machine's glibc, it calls that glibc's
// newest functions, arc4random or _dl_find_object, and would not load on an older one). The
// hook uses no heap, no exceptions and no RTTI, so what its code needs from the runtime is only
// this:
//
//   - the guards of function-local statics (the compiler checks the guard's first byte inline
//     and calls __cxa_guard_acquire only while it is 0: the fast path does not come here);
//   - registering the destructors of thread_local objects;
//   - the functions through which libstdc++'s headers throw (std::mutex::lock, string_view's
//     bounds). Without exceptions a throw could only end in std::terminate: these end the
//     process the same way, directly, after one line on stderr.
//
// A call of anything else of libstdc++ fails the link with an undefined reference: add it here
// only if it keeps to the rules above; otherwise the hook should not call it. Hidden, like
// everything libcuslice.map does not export. May call log only.
#include <bits/functexcept.h>
#include <pthread.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "hook/base/log.h"

namespace {

// One lock and one condition for every guard: an initialisation runs once per process, and
// only threads that meet one still running ever wait.
pthread_mutex_t g_guard_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_guard_done = PTHREAD_COND_INITIALIZER;

// A guard (Itanium C++ ABI, 3.3.2) is 64 bits. Byte 0: the object is initialised; the compiler
// reads it inline with acquire ordering, and only release sets it. Byte 1: a thread is
// initialising it; read and written under g_guard_lock only.
uint8_t* initialised(int64_t* guard) { return reinterpret_cast<uint8_t*>(guard); }
uint8_t* running(int64_t* guard) { return reinterpret_cast<uint8_t*>(guard) + 1; }

[[noreturn]] void fatal(const char* what, const char* why) {
  CUSLICE_LOG(kError, "%s inside libcuslice.so (%s): ending the process", what, why);
  abort();
}

}  // namespace

extern "C" {

// 1: the caller initialises the object, then calls release (or abort if it cannot). 0: it is
// initialised. A recursive initialisation of one object waits for itself forever (the C++
// standard leaves it undefined). Out of line, as libstdc++'s are: link-time optimisation would
// otherwise inline them into every function with a static, beside its fast path.
__attribute__((noinline)) int __cxa_guard_acquire(int64_t* guard) {
  if (__atomic_load_n(initialised(guard), __ATOMIC_ACQUIRE) != 0) return 0;
  pthread_mutex_lock(&g_guard_lock);
  while (__atomic_load_n(initialised(guard), __ATOMIC_ACQUIRE) == 0 && *running(guard) != 0)
    pthread_cond_wait(&g_guard_done, &g_guard_lock);
  const bool first = __atomic_load_n(initialised(guard), __ATOMIC_ACQUIRE) == 0;
  if (first) *running(guard) = 1;
  pthread_mutex_unlock(&g_guard_lock);
  return first ? 1 : 0;
}

__attribute__((noinline)) void __cxa_guard_release(int64_t* guard) {
  pthread_mutex_lock(&g_guard_lock);
  *running(guard) = 0;
  __atomic_store_n(initialised(guard), 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&g_guard_done);
  pthread_mutex_unlock(&g_guard_lock);
}

__attribute__((noinline)) void __cxa_guard_abort(int64_t* guard) {
  pthread_mutex_lock(&g_guard_lock);
  *running(guard) = 0;
  pthread_cond_broadcast(&g_guard_done);
  pthread_mutex_unlock(&g_guard_lock);
}

// glibc 2.18 and later run thread_local destructors themselves, and keep the library that
// registered one loaded until they have run; libstdc++'s own version calls this too.
int __cxa_thread_atexit_impl(void (*destructor)(void*), void* object, void* dso) noexcept;

int __cxa_thread_atexit(void (*destructor)(void*), void* object, void* dso) noexcept {
  return __cxa_thread_atexit_impl(destructor, object, dso);
}

}  // extern "C"

namespace std {

void __throw_system_error(int error) { fatal("a lock failed", strerror(error)); }

void __throw_out_of_range_fmt(const char* format, ...) { fatal("an index out of range", format); }

}  // namespace std
