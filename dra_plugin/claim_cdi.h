// Where a prepared claim's CDI spec goes and how containers name its device: one spec file
// per claim in the CDI directory (/var/run/cdi), one device named by the claim's UID, whose
// containerEdits are the tenant's (common/container_edits.h: environment, hook and preload
// mounts, scheduler socket and segment, device nodes; common/cdi_spec.h builds the spec). The
// kubelet passes the device's ID to the container runtime, which applies the edits to each
// container that uses the claim.
//
// Pure: builds names; the preparer writes and removes the files.
#pragma once

#include <string>

namespace cuslice::dra {

inline constexpr const char* kCdiKind = "gpu.cuslice.io/claim";
// A spec carries its claim's credential (CUSLICE_TENANT=<tenant>:<key>), with which any
// process could join the claim's tenant: readable by the driver's user alone. The container
// runtime, which reads it, runs as root.
inline constexpr unsigned kCdiSpecMode = 0600;

// "gpu.cuslice.io/claim=<uid>".
std::string cdi_device_id(const std::string& claim_uid);
// "<dir>/gpu.cuslice.io-claim_<uid>.json", as CDI names a vendor's spec files.
std::string cdi_spec_path(const std::string& cdi_dir, const std::string& claim_uid);

}  // namespace cuslice::dra
