// What each live allocation was charged, so that its free gives exactly that back.
//
// A fixed-capacity open-addressing hash table keyed by a 64-bit value (device pointer,
// allocation handle, array or context handle), lock-free: insert claims a slot with one CAS,
// remove turns it into a tombstone that later inserts reuse. Storage is one anonymous mmap
// made at first use (pages are touched only as slots are used), so the allocation paths
// never call malloc. Keys are unique while live (the driver never hands out a live pointer
// twice), which is what makes tombstone reuse safe without a lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cuslice {

struct Charge {
  uint64_t bytes = 0;
  int device = -1;
  uint32_t refs = 0;  // VMM handles: cuMemCreate + cuMemRetainAllocationHandle count
};

class AllocationTable {
 public:
  // capacity_log2: the table holds up to 2^capacity_log2 live entries (probing stops at a
  // bounded distance, so a table close to full refuses inserts rather than slowing down).
  explicit constexpr AllocationTable(unsigned capacity_log2) : log2_(capacity_log2) {}

  // False when the table has no room (the caller then refuses the allocation).
  bool insert(uint64_t key, const Charge& c);
  // Removes key and returns what it was charged; false if the key is not tracked.
  bool remove(uint64_t key, Charge* out);
  // Adds `delta` references to a live key; returns the new count, or 0 if not tracked.
  uint32_t add_refs(uint64_t key, int32_t delta);
  bool contains(uint64_t key) const;

  // Drops every entry of `device` (or all, device < 0), returning the bytes they held.
  uint64_t forget_device(int device);
  // Forgets everything without touching the storage a parent process shared (after fork).
  void reset();

 private:
  struct Slot {
    std::atomic<uint64_t> key;
    std::atomic<uint64_t> bytes;
    std::atomic<int32_t> device;
    std::atomic<uint32_t> refs;
  };
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = ~uint64_t{0};
  static constexpr unsigned kMaxProbe = 4096;

  Slot* slots() const;
  Slot* find(uint64_t key) const;
  size_t mask() const { return (size_t{1} << log2_) - 1; }

  unsigned log2_;
  mutable std::atomic<Slot*> slots_{nullptr};
};

// The tables the hook keeps, one per kind of thing that holds device memory.
AllocationTable& device_pointers();   // cuMemAlloc*, pitch, managed
AllocationTable& vmm_handles();       // cuMemCreate
AllocationTable& arrays();            // CUarray and CUmipmappedArray
AllocationTable& contexts();          // cuCtxCreate

}  // namespace cuslice
