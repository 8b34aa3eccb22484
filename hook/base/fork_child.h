// The one way the hook puts its state back in the child of fork(): an object becomes what a
// fresh process has, as its default member initialisers say. Used by every fork handler of
// the hook (startup.cpp runs them), so that no reset lists fields one by one and none is
// forgotten when a field is added. May call nothing.
#pragma once

#include <new>
#include <type_traits>

namespace cuslice {

// Only the forking thread exists in the child: nothing else can be using `object`, and a lock
// another thread held at the fork is meaningless there. For mutexes, atomics and plain
// structs of them: nothing is destroyed first, so nothing that owns a resource.
template <typename T>
void renew_in_child(T& object) {
  static_assert(std::is_trivially_destructible_v<T>, "renew_in_child() would leak what T owns");
  new (&object) T();
}

}  // namespace cuslice
