// door_probe: an LD_PRELOAD shim that records through which door a program reaches the driver.
//
// It overrides dlsym and dlopen (not dlvsym: the shim needs the real one to find the others),
// and counts every lookup of a name that starts with
// "cu" or "nvml" by (door, calling library, handle's library, name). When a lookup returns
// cuGetProcAddress or cuGetProcAddress_v2 it hands back a counting wrapper, so the names asked
// for through cuGetProcAddress (with their cudaVersion and flags) are recorded too. Nothing
// is changed: every call returns what the real one returns (apart from the wrapper pointer).
//
// At exit it appends a report to $DOOR_PROBE_OUT (or stderr): one line per distinct lookup,
// then a summary per (door, caller, handle).
//
//   cc -O2 -shared -fPIC -o door_probe.so door_probe.c -ldl
//   DOOR_PROBE_OUT=/tmp/doors.txt LD_PRELOAD=./door_probe.so python3 -c "import torch; ..."
//
// Forwarding keeps the caller's identity: dlsym(RTLD_NEXT, ...) and dlopen of a relative name
// depend on the return address, so the forwarding calls are tail calls (probe.sh checks the
// disassembly for the jmp).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void* (*dlsym_fn)(void*, const char*);
typedef void* (*dlopen_fn)(const char*, int);
typedef int (*gpa1_fn)(const char*, void**, int, uint64_t);
typedef int (*gpa2_fn)(const char*, void**, int, uint64_t, int*);

static dlsym_fn real_dlsym;
static dlopen_fn real_dlopen;
static gpa1_fn real_gpa1;
static gpa2_fn real_gpa2;
static char out_path[512];

static void init(void) {
  if (real_dlsym) return;
  real_dlopen = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
  if (!real_dlopen) real_dlopen = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
  dlsym_fn d = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!d) d = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  real_dlsym = d;
}

// ---- the record table (fixed size, spinlock; no dl* call is made while holding the lock) -----

enum { kLibs = 512, kEntries = 16384, kName = 112 };
static char libs[kLibs][160];
static int nlibs;
struct entry {
  char door;  // D dlsym, O dlopen, G cuGetProcAddress_v2, g cuGetProcAddress
  short caller, handle;
  char name[kName];
  unsigned long count;
};
static struct entry entries[kEntries];
static int nentries;
static volatile int lock_word;
static unsigned long dropped;

static void lock(void) { while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE)) {} }
static void unlock(void) { __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE); }

static short intern(const char* path) {  // under the lock
  const char* b = strrchr(path, '/');
  b = b ? b + 1 : path;
  for (int i = 0; i < nlibs; ++i)
    if (strcmp(libs[i], b) == 0) return (short)i;
  if (nlibs == kLibs) return 0;
  snprintf(libs[nlibs], sizeof libs[0], "%s", b);
  return (short)nlibs++;
}

static const char* lib_of_addr(const void* addr) {
  Dl_info di;
  if (addr && dladdr(addr, &di) && di.dli_fname) return di.dli_fname[0] ? di.dli_fname : "<main>";
  return "<unknown>";
}

static const char* lib_of_handle(void* handle) {
  if (handle == RTLD_DEFAULT) return "RTLD_DEFAULT";
  if (handle == RTLD_NEXT) return "RTLD_NEXT";
  struct link_map* lm = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm) return lm->l_name[0] ? lm->l_name : "<main>";
  return "<bad handle>";
}

static void record(char door, const char* caller, const char* handle, const char* name) {
  lock();
  short c = intern(caller), h = intern(handle);
  int i = 0;
  for (; i < nentries; ++i)
    if (entries[i].door == door && entries[i].caller == c && entries[i].handle == h &&
        strncmp(entries[i].name, name, kName - 1) == 0)
      break;
  if (i == nentries) {
    if (nentries == kEntries) { ++dropped; unlock(); return; }
    entries[i].door = door;
    entries[i].caller = c;
    entries[i].handle = h;
    snprintf(entries[i].name, kName, "%s", name);
    ++nentries;
  }
  ++entries[i].count;
  unlock();
}

static int interesting(const char* n) {
  return n && ((n[0] == 'c' && n[1] == 'u') || strncmp(n, "nvml", 4) == 0);
}

// ---- cuGetProcAddress wrappers -------------------------------------------------------------

static int gpa2_wrapper(const char* sym, void** pfn, int ver, uint64_t flags, int* status);
static int gpa1_wrapper(const char* sym, void** pfn, int ver, uint64_t flags);

static void substitute(void** pfn) {  // the driver handing out cuGetProcAddress itself
  if (!pfn || !*pfn) return;
  if (*pfn == (void*)real_gpa2) *pfn = (void*)gpa2_wrapper;
  else if (*pfn == (void*)real_gpa1) *pfn = (void*)gpa1_wrapper;
}

static void record_gpa(char door, const void* ret, const char* sym, int ver, uint64_t flags,
                       void* got) {
  char what[kName];
  snprintf(what, sizeof what, "%s @%d f%llu%s", sym ? sym : "(null)", ver,
           (unsigned long long)flags, got ? "" : " ->NULL");
  record(door, lib_of_addr(ret), "(via cuGetProcAddress)", what);
}

static int gpa2_wrapper(const char* sym, void** pfn, int ver, uint64_t flags, int* status) {
  int r = real_gpa2(sym, pfn, ver, flags, status);
  record_gpa('G', __builtin_return_address(0), sym, ver, flags, pfn ? *pfn : NULL);
  substitute(pfn);
  return r;
}

static int gpa1_wrapper(const char* sym, void** pfn, int ver, uint64_t flags) {
  int r = real_gpa1(sym, pfn, ver, flags);
  record_gpa('g', __builtin_return_address(0), sym, ver, flags, pfn ? *pfn : NULL);
  substitute(pfn);
  return r;
}

static void* wrap_gpa(void* p, const char* name) {
  if (!p) return p;
  if (strcmp(name, "cuGetProcAddress_v2") == 0) { real_gpa2 = (gpa2_fn)p; return (void*)gpa2_wrapper; }
  if (strcmp(name, "cuGetProcAddress") == 0) { real_gpa1 = (gpa1_fn)p; return (void*)gpa1_wrapper; }
  return p;
}

// ---- the overridden entry points -------------------------------------------------------------

__attribute__((noinline)) static void* dlsym_gpa(void* handle, const char* name, const void* ret) {
  void* p = real_dlsym(handle, name);
  record('D', lib_of_addr(ret), lib_of_handle(handle), name);
  return wrap_gpa(p, name);
}

void* dlsym(void* handle, const char* name) {
  init();
  if (interesting(name)) {
    if (strncmp(name, "cuGetProcAddress", 16) == 0)
      return dlsym_gpa(handle, name, __builtin_return_address(0));
    record('D', lib_of_addr(__builtin_return_address(0)), lib_of_handle(handle), name);
  }
  return real_dlsym(handle, name);  // tail call: the caller's return address reaches glibc
}

void* dlopen(const char* file, int flags) {
  init();
  if (file && (strstr(file, "libcuda") || strstr(file, "nvidia-ml") || strstr(file, "cudart"))) {
    char what[kName];
    snprintf(what, sizeof what, "%s flags=0x%x%s", file, flags,
             (flags & RTLD_DEEPBIND) ? " DEEPBIND" : "");
    record('O', lib_of_addr(__builtin_return_address(0)), "-", what);
  }
  return real_dlopen(file, flags);
}

// ---- the report ------------------------------------------------------------------------------

static void out(int fd, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 1) n = sizeof buf - 1;
  if (n > 0 && write(fd, buf, (size_t)n) < 0) {}
}

__attribute__((constructor)) static void door_probe_start(void) {
  init();
  const char* p = getenv("DOOR_PROBE_OUT");
  if (p) snprintf(out_path, sizeof out_path, "%s", p);
}

__attribute__((destructor)) static void door_probe_report(void) {
  int fd = out_path[0] ? open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644) : 2;
  if (fd < 0) fd = 2;
  char cmd[256] = {0};
  int cf = open("/proc/self/cmdline", O_RDONLY);
  if (cf >= 0) {
    ssize_t n = read(cf, cmd, sizeof cmd - 1);
    for (ssize_t i = 0; i < n; ++i) if (!cmd[i]) cmd[i] = ' ';
    close(cf);
  }
  lock();
  out(fd, "==== door_probe pid %d: %s\n", (int)getpid(), cmd);
  out(fd, "---- detail: door caller -> handle : name  x count   (D dlsym, O dlopen, "
          "G cuGetProcAddress_v2, g cuGetProcAddress)\n");
  for (int i = 0; i < nentries; ++i)
    out(fd, "%c %s -> %s : %s  x%lu\n", entries[i].door, libs[entries[i].caller],
        libs[entries[i].handle], entries[i].name, entries[i].count);
  out(fd, "---- summary: door caller -> handle : distinct names / lookups\n");
  for (int i = 0; i < nentries; ++i) {
    int first = 1;
    for (int j = 0; j < i; ++j)
      if (entries[j].door == entries[i].door && entries[j].caller == entries[i].caller &&
          entries[j].handle == entries[i].handle) { first = 0; break; }
    if (!first) continue;
    unsigned long distinct = 0, total = 0;
    for (int j = i; j < nentries; ++j)
      if (entries[j].door == entries[i].door && entries[j].caller == entries[i].caller &&
          entries[j].handle == entries[i].handle) { ++distinct; total += entries[j].count; }
    out(fd, "S %c %s -> %s : %lu / %lu\n", entries[i].door, libs[entries[i].caller],
        libs[entries[i].handle], distinct, total);
  }
  if (dropped) out(fd, "!! %lu lookups dropped (table full)\n", dropped);
  unlock();
  if (fd != 2) close(fd);
}
