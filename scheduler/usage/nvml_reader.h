// The daemon's view of the driver through NVML: each GPU's compute processes and the memory
// the driver counts for each. libnvidia-ml.so.1 is opened at run time (nvml/nvml_library.h),
// so the daemon runs, without this view, on a machine that has no NVIDIA driver; tests put the
// fake NVML of tests/fake_driver in its place. Used by the usage watchdog, and for the size of
// each card.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/usage/usage_watchdog.h"

namespace cuslice {

class NvmlReader {
 public:
  // Opens and initialises NVML; unavailable() says why when that failed.
  NvmlReader();
  ~NvmlReader();
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  // Empty when NVML can be used; else why not, for one log line.
  const std::string& unavailable() const { return unavailable_; }

  // Per GPU (NVML index, as hooks name GPUs in the segment): the processes the driver runs.
  // nullopt when a query failed (the reason in *error).
  std::optional<std::vector<std::vector<DriverProcess>>> processes(std::string* error) const;
  // Per GPU (NVML index): its memory in bytes as the driver says, 0 where NVML will not say.
  // The daemon's own figure of each card, which no tenant reports.
  std::vector<uint64_t> memory_totals() const;

 private:
  std::string unavailable_;
  struct Api;
  std::unique_ptr<Api> api_;  // null when unavailable
};

}  // namespace cuslice
