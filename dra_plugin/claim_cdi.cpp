#include "dra_plugin/claim_cdi.h"

namespace cuslice::dra {

std::string cdi_device_id(const std::string& claim_uid) { return std::string(kCdiKind) + "=" + claim_uid; }

std::string cdi_spec_path(const std::string& cdi_dir, const std::string& claim_uid) {
  return cdi_dir + "/gpu.cuslice.io-claim_" + claim_uid + ".json";
}

}  // namespace cuslice::dra
