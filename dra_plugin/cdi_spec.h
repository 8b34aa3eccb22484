// The CDI spec that makes the containers of a prepared claim the claim's tenant: one spec file
// per claim in the CDI directory (/var/run/cdi), one device named by the claim's UID, whose
// containerEdits are the tenant's (common/container_edits.h: environment, hook and preload
// mounts, scheduler socket and segment, device nodes). The kubelet passes the device's ID to
// the container runtime, which applies the edits to each container that uses the claim.
//
// Pure: builds names and JSON; the preparer writes and removes the files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/container_edits.h"

namespace cuslice::dra {

// CDI 0.6.0, the version of the schema the tests check against; env, mounts and device nodes
// are older than it, so any CDI-capable runtime reads this spec.
inline constexpr const char* kCdiVersion = "0.6.0";
inline constexpr const char* kCdiKind = "gpu.cuslice.io/claim";

// "gpu.cuslice.io/claim=<uid>".
std::string cdi_device_id(const std::string& claim_uid);
// "<dir>/gpu.cuslice.io-claim_<uid>.json", as CDI names a vendor's spec files.
std::string cdi_spec_path(const std::string& cdi_dir, const std::string& claim_uid);

nlohmann::ordered_json cdi_spec(const std::string& claim_uid, const node::ContainerEdits& edits);

}  // namespace cuslice::dra
