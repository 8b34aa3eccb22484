// The claims this node's driver has prepared, kept in a file so that a restarted plugin
// answers the kubelet's repeated calls as before (same tenant, same credential, same CDI
// device) and finds the tenants a restarted scheduler lost. Written whole (common/atomic_file.h),
// mode 0600: it holds the tenants' credentials.
//
// A device several claims share is held by each (claim UID, share ID): it is free of this
// node's tenants once no prepared claim names it (holders()).
//
// Not thread-safe: the preparer owns it under its lock.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dra_plugin/claim_allocation.h"

namespace cuslice::dra {

struct PreparedClaim {
  std::string uid, name_space, name;
  std::string pod;     // the pod it was reserved for, when known
  std::string tenant;  // the scheduler tenant: "dra-<uid>"
  std::string key;     // its credential
  TenantPlan plan;
  std::vector<std::string> gpu_uuids;  // of plan.gpus, in that order
  std::vector<AllocatedDevice> devices;
};

class Checkpoint {
 public:
  explicit Checkpoint(std::string path) : path_(std::move(path)) {}

  // Reads the file; a missing file is an empty checkpoint. False with `why` when the file
  // cannot be read or is not a checkpoint (the plugin then refuses to start rather than
  // forget claims).
  bool load(std::string& why);
  bool save(std::string& why) const;

  std::map<std::string, PreparedClaim> claims;  // by UID

 private:
  std::string path_;
};

// Who holds each device ("<pool>/<device>"): "<claim uid>" or "<claim uid>/<share id>".
std::map<std::string, std::vector<std::string>> holders(const std::map<std::string, PreparedClaim>& claims);

}  // namespace cuslice::dra
