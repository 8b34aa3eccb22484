#include "knobs.h"

#include <cerrno>
#include <cstdlib>

namespace fake_cuda {
namespace {

// Overwrites *value only when the variable is set to a whole decimal number.
template <class Number>
void read_size(const char* variable, Number* value) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text < '0' || *text > '9') return;
  char* end = nullptr;
  errno = 0;
  unsigned long long parsed = std::strtoull(text, &end, 10);
  if (errno == 0 && *end == '\0') *value = static_cast<Number>(parsed);
}

}  // namespace

Knobs read_knobs_from_environment() {
  Knobs knobs;
  std::size_t count = static_cast<std::size_t>(knobs.device_count);
  read_size("FAKE_CUDA_DEVICE_COUNT", &count);
  if (count >= 1 && count <= static_cast<std::size_t>(kMaxDevices)) {
    knobs.device_count = static_cast<int>(count);
  }
  read_size("FAKE_CUDA_DEVICE_MEMORY", &knobs.device_memory);
  read_size("FAKE_CUDA_CONTEXT_BYTES", &knobs.context_bytes);
  read_size("FAKE_CUDA_MODULE_BYTES", &knobs.module_bytes);
  read_size("FAKE_CUDA_KERNEL_US", &knobs.kernel_us);
  if (const char* name = std::getenv("FAKE_CUDA_SHARED_DEVICE")) knobs.shared_device = name;
  return knobs;
}

}  // namespace fake_cuda
