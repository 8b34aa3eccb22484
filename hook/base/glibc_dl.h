// glibc's own dlsym and dlvsym.
//
// The hook exports dlsym/dlvsym, so a plain call to either from inside the library would bind
// to our own definitions (preloaded objects come first in the global scope, versioned
// references included). glibc >= 2.34 removed __libc_dlsym/_dl_sym, so the real functions are
// found by reading libc's dynamic symbol table (GNU hash) directly. Nothing here allocates,
// calls dlsym or calls any libc function a sanitizer intercepts (a sanitizer's runtime calls
// our dlsym before its interceptors work); safe from a library constructor.
#pragma once

namespace cuslice {

// Resolves glibc's dlsym/dlvsym once; true when both were found. Thread-safe, idempotent.
bool resolve_glibc_dl();

// glibc's functions (valid after resolve_glibc_dl() returned true).
void* glibc_dlsym(void* handle, const char* name);
void* glibc_dlvsym(void* handle, const char* name, const char* version);

// Pointers the dlsym/dlvsym trampolines tail-jump to when a lookup is not ours. They start at
// a fallback that fails the lookup cleanly, never at nullptr.
extern "C" void* cuslice_next_dlsym;
extern "C" void* cuslice_next_dlvsym;

}  // namespace cuslice
