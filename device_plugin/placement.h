// Which GPU a container's memory goes to: one where its memory and its compute both fit,
// chosen by the node's placement policy (--placement). Pure: the caller says what each GPU
// has free; nothing here knows IDs, the kubelet or the allocation record.
//
// The rules, in order:
//   1. A GPU is a candidate when the memory fits (its free units the kubelet offers hold the
//      request) and the compute fits: its free compute (compute_room.h) holds the container's
//      compute when that is known, else at least the 1% a container without compute keeps.
//   2. Compute not known (the container's memory call came first, or it asks for none): of
//      the candidates, only those with the least compute promised remain. Whatever compute the
//      container's next call asks then fits here whenever it fits on any GPU that holds the
//      memory (up to the 1% each container without compute keeps back).
//   3. The policy chooses among them by what the container leaves free there: memory (all
//      the GPU has free, whether offered or not) as a fraction of the GPU's capacity plus
//      compute as a fraction of the GPU. Binpack takes the least (whole GPUs stay free for
//      large requests), spread the most (containers share a GPU with as few others as can
//      be). Ties go to the lower index.
//   4. When the compute known fits on no GPU that holds the memory, the choice is made as if
//      it were not known: the compute call just before may have been another container's
//      (call_pairing.h), and the container's start is where a misfit is refused.
//   5. When no GPU has compute free at all, the memory alone decides, under 3: the kubelet
//      still gets IDs of one GPU, never IDs spread over several.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "device_plugin/compute_room.h"

namespace cuslice::device_plugin {

enum class PlacementPolicy { kBinpack, kSpread };

// "binpack" or "spread"; nullopt for anything else.
std::optional<PlacementPolicy> parse_placement(std::string_view text);
const char* placement_name(PlacementPolicy policy);

// One GPU as placement sees it.
struct GpuRoom {
  uint32_t index = 0;           // Gpu::index
  uint32_t capacity_units = 0;  // GiB the GPU hands out (GpuTable::capacity_units)
  uint32_t free_units = 0;      // GiB of it the kubelet offers this container
  uint32_t unused_units = 0;    // GiB of it no container holds (fewer may be advertised)
  GpuCompute compute;           // what the plugin's tenants there hold
};

struct PlacementRequest {
  uint32_t units = 0;               // GiB asked for
  std::optional<uint32_t> compute;  // percent, when known
};

// The position in `rooms` of the GPU chosen; nullopt when no GPU holds the memory.
std::optional<size_t> choose_gpu(const std::vector<GpuRoom>& rooms, const PlacementRequest& request,
                                 PlacementPolicy policy);

}  // namespace cuslice::device_plugin
