#include "hook/base/glibc_dl.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstdint>

namespace cuslice {
namespace {

// No libc string functions on this path: a sanitizer's runtime calls dlsym (ours) while it
// installs its interceptors of those very functions, and a call through one not installed
// yet jumps to address 0.
bool same(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

void* unavailable_dlsym(void*, const char*) { return nullptr; }
void* unavailable_dlvsym(void*, const char*, const char*) { return nullptr; }

struct Found {
  void* dlsym = nullptr;
  void* dlvsym = nullptr;
};

uint32_t gnu_hash(const char* s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

// What lookup_default() needs of an object's dynamic section.
struct DynamicTables {
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* hash = nullptr;
  const ElfW(Half)* versym = nullptr;
};

DynamicTables tables_of(const link_map* object) {
  DynamicTables t;
  const ElfW(Addr) base = object->l_addr;
  // glibc relocates these entries in place on most architectures, not on all: accept both.
  auto addr = [base](ElfW(Addr) p) { return p < base ? p + base : p; };
  for (const ElfW(Dyn)* d = object->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: t.symtab = reinterpret_cast<const ElfW(Sym)*>(addr(d->d_un.d_ptr)); break;
      case DT_STRTAB: t.strtab = reinterpret_cast<const char*>(addr(d->d_un.d_ptr)); break;
      case DT_GNU_HASH: t.hash = reinterpret_cast<const uint32_t*>(addr(d->d_un.d_ptr)); break;
      case DT_VERSYM: t.versym = reinterpret_cast<const ElfW(Half)*>(addr(d->d_un.d_ptr)); break;
      default: break;
    }
  }
  return t;
}

// Whether symbol idx is a default-version definition of `name`. Skips hidden (non-default)
// versions such as dlsym@GLIBC_2.2.5 beside dlsym@@GLIBC_2.34.
bool defines(const DynamicTables& t, uint32_t idx, const char* name) {
  const ElfW(Sym)& s = t.symtab[idx];
  const bool hidden = t.versym != nullptr && (t.versym[idx] & 0x8000) != 0;
  return !hidden && s.st_shndx != SHN_UNDEF && s.st_value != 0 && same(t.strtab + s.st_name, name);
}

// The default-version definition of `name` in one loaded object, via its GNU hash table.
void* lookup_default(const link_map* object, const char* name) {
  if (object->l_ld == nullptr) return nullptr;
  const DynamicTables t = tables_of(object);
  if (t.symtab == nullptr || t.strtab == nullptr || t.hash == nullptr) return nullptr;

  const uint32_t nbuckets = t.hash[0], symoffset = t.hash[1], bloom_size = t.hash[2];
  const uint32_t* buckets = t.hash + 4 + bloom_size * (sizeof(ElfW(Addr)) / sizeof(uint32_t));
  const uint32_t* chain = buckets + nbuckets;
  const uint32_t h = gnu_hash(name);
  uint32_t idx = buckets[h % nbuckets];
  if (idx < symoffset) return nullptr;
  for (;; ++idx) {
    const uint32_t ch = chain[idx - symoffset];
    if ((ch | 1) == (h | 1) && defines(t, idx, name))
      return reinterpret_cast<void*>(object->l_addr + t.symtab[idx].st_value);
    if (ch & 1) break;
  }
  return nullptr;
}

bool is_object(const char* path, const char* soname) {
  if (path == nullptr) return false;
  const char* name = path;
  for (const char* p = path; *p != '\0'; ++p)
    if (*p == '/') name = p + 1;
  return same(name, soname);
}

// Walks the loader's list of objects (r_debug, the list debuggers read) rather than calling
// dl_iterate_phdr: ThreadSanitizer intercepts dl_iterate_phdr and calls dlsym (ours) while it
// installs its interceptors, so that call would jump to its interceptor's unset target. libc
// (and libdl) load with the program, ahead of anything dlopen adds or removes later, so the
// entries read up to them never change.
Found find_glibc_dl() {
  Found found;
  for (const link_map* object = _r_debug.r_map; object != nullptr; object = object->l_next) {
    // glibc >= 2.34 keeps dlsym in libc.so.6; older ones in libdl.so.2.
    if (!is_object(object->l_name, "libc.so.6") && !is_object(object->l_name, "libdl.so.2"))
      continue;
    if (found.dlsym == nullptr) found.dlsym = lookup_default(object, "dlsym");
    if (found.dlvsym == nullptr) found.dlvsym = lookup_default(object, "dlvsym");
    if (found.dlsym != nullptr && found.dlvsym != nullptr) break;
  }
  return found;
}

std::atomic<bool> g_resolved{false};

}  // namespace

extern "C" {
__attribute__((visibility("hidden"))) void* cuslice_next_dlsym =
    reinterpret_cast<void*>(&unavailable_dlsym);
__attribute__((visibility("hidden"))) void* cuslice_next_dlvsym =
    reinterpret_cast<void*>(&unavailable_dlvsym);
}

bool resolve_glibc_dl() {
  if (g_resolved.load(std::memory_order_acquire)) return true;
  const Found found = find_glibc_dl();
  if (found.dlsym == nullptr || found.dlvsym == nullptr) return false;
  // Two threads may race here; both store the same values.
  __atomic_store_n(&cuslice_next_dlsym, found.dlsym, __ATOMIC_RELEASE);
  __atomic_store_n(&cuslice_next_dlvsym, found.dlvsym, __ATOMIC_RELEASE);
  g_resolved.store(true, std::memory_order_release);
  return true;
}

void* glibc_dlsym(void* handle, const char* name) {
  using Fn = void* (*)(void*, const char*);
  return reinterpret_cast<Fn>(__atomic_load_n(&cuslice_next_dlsym, __ATOMIC_ACQUIRE))(handle, name);
}

void* glibc_dlvsym(void* handle, const char* name, const char* version) {
  using Fn = void* (*)(void*, const char*, const char*);
  return reinterpret_cast<Fn>(__atomic_load_n(&cuslice_next_dlvsym, __ATOMIC_ACQUIRE))(
      handle, name, version);
}

// Resolve as early as possible: before main, before any other library asks us for a symbol.
__attribute__((constructor)) static void resolve_at_load() { resolve_glibc_dl(); }

}  // namespace cuslice
