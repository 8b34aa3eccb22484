#include "hook/bookkeeping/allocation_table.h"

#include <sys/mman.h>

#include <cstring>

namespace cuslice {
namespace {

inline size_t hash_key(uint64_t k) {
  // splitmix64 finaliser: device pointers share their low bits (alignment).
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebull;
  k ^= k >> 31;
  return static_cast<size_t>(k);
}

}  // namespace

AllocationTable::Slot* AllocationTable::slots() const {
  Slot* s = slots_.load(std::memory_order_acquire);
  if (s != nullptr) return s;
  const size_t bytes = sizeof(Slot) << log2_;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  Slot* expected = nullptr;
  // Zero pages are empty slots. If another thread won the race, give ours back.
  if (!slots_.compare_exchange_strong(expected, static_cast<Slot*>(mem), std::memory_order_acq_rel)) {
    munmap(mem, bytes);
    return expected;
  }
  return static_cast<Slot*>(mem);
}

bool AllocationTable::insert(uint64_t key, const Charge& c) {
  Slot* s = slots();
  if (s == nullptr || key == kEmpty || key == kTombstone) return false;
  size_t i = hash_key(key);
  for (unsigned probe = 0; probe < kMaxProbe; ++probe, ++i) {
    Slot& slot = s[i & mask()];
    uint64_t cur = slot.key.load(std::memory_order_relaxed);
    if (cur != kEmpty && cur != kTombstone) continue;
    // Fill the payload first: a reader that matches the key must see the charge.
    if (slot.key.compare_exchange_strong(cur, kTombstone - 1, std::memory_order_acquire)) {
      slot.bytes.store(c.bytes, std::memory_order_relaxed);
      slot.device.store(c.device, std::memory_order_relaxed);
      slot.refs.store(c.refs, std::memory_order_relaxed);
      slot.key.store(key, std::memory_order_release);
      return true;
    }
  }
  return false;
}

AllocationTable::Slot* AllocationTable::find(uint64_t key) const {
  Slot* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr || key == kEmpty || key == kTombstone) return nullptr;
  size_t i = hash_key(key);
  for (unsigned probe = 0; probe < kMaxProbe; ++probe, ++i) {
    Slot& slot = s[i & mask()];
    uint64_t cur = slot.key.load(std::memory_order_acquire);
    if (cur == key) return &slot;
    if (cur == kEmpty) return nullptr;
  }
  return nullptr;
}

bool AllocationTable::remove(uint64_t key, Charge* out) {
  Slot* slot = find(key);
  if (slot == nullptr) return false;
  Charge c{slot->bytes.load(std::memory_order_relaxed), slot->device.load(std::memory_order_relaxed),
           slot->refs.load(std::memory_order_relaxed)};
  uint64_t expected = key;
  // Two frees of one pointer race here; only one gets the charge back.
  if (!slot->key.compare_exchange_strong(expected, kTombstone, std::memory_order_acq_rel)) return false;
  if (out) *out = c;
  return true;
}

uint32_t AllocationTable::add_refs(uint64_t key, int32_t delta) {
  Slot* slot = find(key);
  if (slot == nullptr) return 0;
  return slot->refs.fetch_add(static_cast<uint32_t>(delta), std::memory_order_acq_rel) +
         static_cast<uint32_t>(delta);
}

bool AllocationTable::contains(uint64_t key) const { return find(key) != nullptr; }

uint64_t AllocationTable::forget_device(int device) {
  Slot* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  uint64_t freed = 0;
  for (size_t i = 0; i <= mask(); ++i) {
    uint64_t cur = s[i].key.load(std::memory_order_acquire);
    if (cur == kEmpty || cur == kTombstone || cur == kTombstone - 1) continue;
    if (device >= 0 && s[i].device.load(std::memory_order_relaxed) != device) continue;
    uint64_t bytes = s[i].bytes.load(std::memory_order_relaxed);
    if (s[i].key.compare_exchange_strong(cur, kTombstone, std::memory_order_acq_rel)) freed += bytes;
  }
  return freed;
}

void AllocationTable::reset() {
  // The child of fork() shares nothing with the parent's CUDA state: start empty. The old
  // mapping is a private copy; drop it.
  Slot* s = slots_.exchange(nullptr, std::memory_order_acq_rel);
  if (s != nullptr) munmap(s, sizeof(Slot) << log2_);
}

AllocationTable& device_pointers() {
  static AllocationTable t(20);  // 1M live allocations; 24 MiB of address space
  return t;
}
AllocationTable& vmm_handles() {
  static AllocationTable t(16);
  return t;
}
AllocationTable& arrays() {
  static AllocationTable t(14);
  return t;
}
AllocationTable& contexts() {
  static AllocationTable t(10);
  return t;
}

}  // namespace cuslice
