// Virtual memory management: physical allocations (cuMemCreate), address reservations, mappings,
// and handle sharing within the process.
//
// Physical memory has bytes (device_memory.h), zero when created, gone with it; a mapping shows
// them at its range (from its offset), to the devices cuMemSetAccess gave access to. A range
// unmapped and not mapped again is remembered while its reservation lives: under
// FAKE_CUDA_FAULT_ON_UNMAPPED a kernel launched meanwhile faults (DriverState::fault_armed).
//
// Physical memory on a device is charged at cuMemCreate and released once no handle names it
// and no mapping uses it (cuMemRelease can come before cuMemUnmap, as on the real driver). A
// shareable handle (POSIX file descriptor type) is the physical memory's id, not a real fd:
// enough for export and import within one process.
#include <cstdint>
#include <iterator>

#include "tests/fake_driver/cuda/driver_state.h"

using namespace fake_cuda;

namespace {

void release_if_unused(DriverState& state, PhysicalMemory* physical) {
  if (physical->handles > 0 || physical->mappings > 0) return;
  if (physical->device >= 0) {
    state.ledger.release(physical->device, FAKE_CUDA_CHARGE_VMM, physical->size);
  }
  state.physical_memory.erase(physical->id);
}

// [ptr, ptr + size) is mapped again: no longer a range that was unmapped.
void forget_unmapped(DriverState& state, CUdeviceptr ptr, std::size_t size) {
  const CUdeviceptr end = ptr + size;
  auto it = state.unmapped_ranges.lower_bound(ptr);
  if (it != state.unmapped_ranges.begin() && std::prev(it)->first + std::prev(it)->second > ptr) --it;
  while (it != state.unmapped_ranges.end() && it->first < end) {
    const CUdeviceptr base = it->first;
    const CUdeviceptr top = base + it->second;
    it = state.unmapped_ranges.erase(it);
    if (base < ptr) state.unmapped_ranges.emplace(base, ptr - base);
    if (top > end) state.unmapped_ranges.emplace(end, top - end);
  }
}

CUmemGenericAllocationHandle add_handle(DriverState& state, PhysicalMemory* physical) {
  CUmemGenericAllocationHandle handle = state.next_vmm_handle++;
  state.vmm_handles[handle] = VmmHandle{physical, 1};
  ++physical->handles;
  return handle;
}

// The reservation holding [ptr, ptr + size), or end().
std::map<CUdeviceptr, std::size_t>::iterator find_reservation(DriverState& state, CUdeviceptr ptr,
                                                              std::size_t size) {
  auto after = state.va_reservations.upper_bound(ptr);
  if (after == state.va_reservations.begin()) return state.va_reservations.end();
  auto reservation = std::prev(after);
  bool inside = ptr + size <= reservation->first + reservation->second;
  return inside ? reservation : state.va_reservations.end();
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  if (CUresult rc = mps_check(s->mps)) return rc;
  if (handle == nullptr || prop == nullptr || size == 0 || size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto physical = std::make_unique<PhysicalMemory>();
  physical->size = size;
  physical->exportable = prop->requestedHandleTypes;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!s->ledger.valid(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
      if (!s->ledger.try_charge(prop->location.id, FAKE_CUDA_CHARGE_VMM, size)) {
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      physical->device = prop->location.id;
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  physical->contents = std::make_unique<DeviceBytes>(size);
  PhysicalMemory* created = physical.get();
  physical->id = s->next_physical_id++;
  s->physical_memory.emplace(created->id, std::move(physical));
  *handle = add_handle(*s, created);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  auto found = s->vmm_handles.find(handle);
  if (found == s->vmm_handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--found->second.references > 0) return CUDA_SUCCESS;
  PhysicalMemory* physical = found->second.physical;
  s->vmm_handles.erase(found);
  --physical->handles;
  release_if_unused(*s, physical);
  return CUDA_SUCCESS;
}

// Returns the handle the address was mapped with, one reference more (re-created if every
// reference had been released while the mapping kept the memory alive).
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(addr);
  auto after = s->vmm_mappings.upper_bound(ptr);
  if (after == s->vmm_mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  const auto& [base, mapping] = *std::prev(after);
  if (ptr >= base + mapping.size) return CUDA_ERROR_INVALID_VALUE;
  auto existing = s->vmm_handles.find(mapping.handle);
  if (existing != s->vmm_handles.end()) {
    ++existing->second.references;
  } else {
    s->vmm_handles[mapping.handle] = VmmHandle{mapping.physical, 1};
    ++mapping.physical->handles;
  }
  *handle = mapping.handle;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  if (ptr == nullptr || size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  *ptr = s->take_address_range(size);  // the address hint is not honoured
  s->va_reservations.emplace(*ptr, size);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  auto found = s->va_reservations.find(ptr);
  if (found == s->va_reservations.end() || found->second != size) return CUDA_ERROR_INVALID_VALUE;
  s->va_reservations.erase(found);
  forget_unmapped(*s, ptr, size);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  auto found = s->vmm_handles.find(handle);
  if (found == s->vmm_handles.end() || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  PhysicalMemory* physical = found->second.physical;
  if (offset + size > physical->size) return CUDA_ERROR_INVALID_VALUE;
  if (find_reservation(*s, ptr, size) == s->va_reservations.end()) return CUDA_ERROR_INVALID_VALUE;
  auto next = s->vmm_mappings.lower_bound(ptr);
  if (next != s->vmm_mappings.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != s->vmm_mappings.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  VmmMapping mapping;
  mapping.size = size;
  mapping.offset = offset;
  mapping.handle = handle;
  mapping.physical = physical;
  s->vmm_mappings.emplace(ptr, mapping);
  ++physical->mappings;
  forget_unmapped(*s, ptr, size);
  return CUDA_SUCCESS;
}

// Unmaps the mappings that start in [ptr, ptr + size).
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  auto first = s->vmm_mappings.lower_bound(ptr);
  auto last = s->vmm_mappings.lower_bound(ptr + size);
  if (first == last) return CUDA_ERROR_INVALID_VALUE;
  std::vector<PhysicalMemory*> unmapped;
  for (auto it = first; it != last; ++it) {
    unmapped.push_back(it->second.physical);
    s->unmapped_ranges[it->first] = it->second.size;  // disjoint: mapping it forgot any overlap
  }
  s->vmm_mappings.erase(first, last);
  for (PhysicalMemory* physical : unmapped) {
    --physical->mappings;
    release_if_unused(*s, physical);
  }
  return CUDA_SUCCESS;
}

// Gives each device location of desc its access to every mapping [ptr, ptr + size) meets; the
// range must be mapped throughout (mappings laid end to end), else nothing changes. Host
// locations are accepted and not modelled. On cuMemAlloc memory: accepted, changes nothing.
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (CUresult rc = s->current_context_fault()) return rc;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const unsigned int flags = desc[i].flags;
    if (flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && !s->ledger.valid(desc[i].location.id)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
  }
  if (const Allocation* allocation = s->find_allocation(ptr)) {
    return size <= allocation->base + allocation->size - ptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  auto after = s->vmm_mappings.upper_bound(ptr);
  if (after == s->vmm_mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  auto first = std::prev(after);
  if (ptr >= first->first + first->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto last = first;  // the last mapping the range meets
  while (last->first + last->second.size < ptr + size) {
    auto next = std::next(last);
    if (next == s->vmm_mappings.end() || next->first != last->first + last->second.size) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    last = next;
  }
  for (auto it = first;; ++it) {
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        it->second.access[desc[i].location.id] = static_cast<unsigned char>(desc[i].flags);
      }
    }
    if (it == last) break;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void* shareable_handle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto found = s->vmm_handles.find(handle);
  if (shareable_handle == nullptr || found == s->vmm_handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  if ((found->second.physical->exportable & type) == 0) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(shareable_handle) = found->second.physical->id;
  return CUDA_SUCCESS;
}

// A new handle to the same physical memory: nothing new is charged.
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* os_handle, CUmemAllocationHandleType type) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // POSIX file descriptors travel in the pointer's bits, as the real API specifies.
  const int id = static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle));
  auto found = s->physical_memory.find(id);
  if (found == s->physical_memory.end()) return CUDA_ERROR_INVALID_VALUE;
  *handle = add_handle(*s, found->second.get());
  return CUDA_SUCCESS;
}

}  // extern "C"
