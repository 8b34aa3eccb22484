#include "tests/fake_driver/cuda/knobs.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <string>

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

// Calls visit(word) for each word of a comma-separated variable; false when it is unset.
template <class Visit>
bool read_list(const char* variable, Visit visit) {
  const char* text = std::getenv(variable);
  if (text == nullptr) return false;
  std::istringstream list{std::string(text)};
  for (std::string word; std::getline(list, word, ',');) visit(word);
  return true;
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
  read_size("FAKE_CUDA_CHECKPOINT_MS_PER_GIB", &knobs.checkpoint_ms_per_gib);
  read_size("FAKE_CUDA_COPY_MS_PER_GIB", &knobs.copy_ms_per_gib);
  std::uint64_t fault_on_unmapped = 0;
  read_size("FAKE_CUDA_FAULT_ON_UNMAPPED", &fault_on_unmapped);
  knobs.fault_on_unmapped = fault_on_unmapped != 0;
  bool managed = false, ipc = false, failed = false;
  if (read_list("FAKE_CUDA_CHECKPOINT_REFUSE", [&](const std::string& word) {
        managed |= word == "managed";
        ipc |= word == "ipc";
        failed |= word == "failed";
      })) {
    // `failed` alone changes what a refusal leaves, not what is refused.
    const bool only_failed = failed && !managed && !ipc;
    knobs.checkpoint_refuses_managed = only_failed || managed;
    knobs.checkpoint_refuses_ipc = only_failed || ipc;
    knobs.checkpoint_refusal_fails = failed;
  }
  read_list("FAKE_CUDA_HIDDEN_BLOCKERS", [&](const std::string& word) {
    knobs.hidden_managed |= word == "managed";
    knobs.hidden_ipc |= word == "ipc";
  });
  read_list("FAKE_CUDA_CHECKPOINT_FAIL", [&](const std::string& word) {
    if (word == "lock") knobs.checkpoint_failures |= Knobs::kFailLock;
    if (word == "checkpoint") knobs.checkpoint_failures |= Knobs::kFailCheckpoint;
    if (word == "restore") knobs.checkpoint_failures |= Knobs::kFailRestore;
    if (word == "unlock") knobs.checkpoint_failures |= Knobs::kFailUnlock;
    if (word == "checkpoint-fatal") knobs.checkpoint_failures |= Knobs::kFailCheckpointFatal;
    if (word == "restore-fatal") knobs.checkpoint_failures |= Knobs::kFailRestoreFatal;
  });
  return knobs;
}

}  // namespace fake_cuda
