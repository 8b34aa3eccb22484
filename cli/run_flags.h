// The checks of `cuslice run`'s flag values. Each is a CLI11 validator: it returns "" when
// the value is good, else why not; CLI11 puts the flag in front ("--gpus: ...") and main()
// makes it a usage error (exit 2), before anything runs. Some normalise the value in place.
//
// Pure: no environment, no I/O, no CLI11 types. What each flag does is run_command.cpp's.
#pragma once

#include <string>

namespace cuslice::cli {

// --memory: a size with its unit, or a percentage of the card; a quota above zero.
std::string check_memory(std::string& text);
// --share, --limit: a percentage as the tenant YAML writes it ("60%"); normalised to
// "<number>%".
std::string normalise_percent(std::string& text);
// The number of a percentage normalise_percent() accepted.
double percent_value(const std::string& normalised);
// --tenant: a name the configuration's rule accepts (valid_tenant_name, tenant_config.h).
std::string check_tenant(std::string& name);
// --gpus: CUDA_VISIBLE_DEVICES as CUDA reads it.
std::string check_gpus(std::string& list);

}  // namespace cuslice::cli
