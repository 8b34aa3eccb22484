// The Container Device Interface (CDI) spec of one device whose containerEdits are a
// ContainerEdits (common/container_edits.h): the one builder behind both of cuslice's CDI
// specs, `cuslice cdi generate`'s (cli/cdi_spec.h: kind cuslice.io/gpu, for containers started
// by hand) and the DRA driver's (dra_plugin/claim_cdi.h: kind gpu.cuslice.io/claim, one spec
// per prepared claim).
//
// A mount's options follow from ContainerEdits' read_only: a read-only mount brings the
// node's own files (the hook, which must stay executable); a writable one is noexec too, so
// nothing a tenant writes there can be run. Device nodes are listed only when there are some.
//
// Pure: builds JSON; its callers write the files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/container_edits.h"

namespace cuslice {

// CDI 0.6.0 is the version the schema the tests check against describes; env, mounts and
// device nodes are older than it, so any CDI-capable runtime reads these specs.
inline constexpr const char* kCdiVersion = "0.6.0";

// The spec of one device `device_name` of `kind`, keys in the order CDI's documentation uses
// (readable diffs in /etc/cdi).
nlohmann::ordered_json cdi_spec(std::string_view kind, const std::string& device_name, const ContainerEdits& edits);

}  // namespace cuslice
