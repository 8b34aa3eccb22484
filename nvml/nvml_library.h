// NVML opened at run time, for the programs beside the hook: the scheduler's usage watchdog
// (scheduler/usage/nvml_reader.h) and the device plugin's GPU list (device_plugin/gpu_inventory.h).
// libnvidia-ml.so.1 is dlopen'ed, never linked, so each program starts, and says why it has no
// NVML, on a machine without the NVIDIA driver, and tests put the fake NVML of tests/fake_driver
// first on LD_LIBRARY_PATH. This owns loading the library, finding the functions a user names
// (required or optional), nvmlInit/nvmlShutdown, and the text of an nvmlReturn_t; what to ask
// NVML, and how to word a failure for its own log, is the user's. NVML's declarations come from
// hook/base/nvml_api.h, the one place they live. Not for the hook, which allocates nothing on its
// paths and reaches NVML through its own symbol table (hook/base/hooked_symbols.def).
//
// A Library is NVML initialised once (nvmlInit_v2 when it opens, nvmlShutdown when it goes).
// Its functions, and those it found for the user, may be called from any thread, as NVML's
// may.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>

#include "hook/base/nvml_api.h"

namespace cuslice::nvml {

inline constexpr const char* kLibraryName = "libnvidia-ml.so.1";

enum class Need : bool { kRequired, kOptional };

// One function a user calls: its exported name and the pointer that receives its address. A
// required one that the library lacks makes open() fail; an optional one is left null.
class Function {
 public:
  template <typename R, typename... Args>
  Function(const char* name, R (*&slot)(Args...), Need need = Need::kRequired)
      : name_(name), need_(need), slot_(&slot), assign_([](void* slot, void* address) {
          *static_cast<R (**)(Args...)>(slot) = reinterpret_cast<R (*)(Args...)>(address);
        }) {}

  const char* name() const { return name_; }
  Need need() const { return need_; }
  void assign(void* address) const { assign_(slot_, address); }

 private:
  const char* name_;
  Need need_;
  void* slot_;
  void (*assign_)(void* slot, void* address);
};

// Why open() failed: the step, and what the loader or NVML said.
struct OpenFailure {
  enum class Step { kLoad, kResolve, kInit };
  Step step = Step::kLoad;
  std::string library;  // the file open() was given
  // kLoad: dlerror's text; kResolve: the missing function's name; kInit: nvmlInit's error text.
  std::string detail;

  // One sentence for a log: "cannot load libnvidia-ml.so.1: ...", "libnvidia-ml.so.1 lacks
  // nvmlDeviceGetUUID", "nvmlInit failed: ...".
  std::string text() const;
};

class Library {
 public:
  // Loads `file`, finds nvmlInit_v2, nvmlShutdown, nvmlErrorString (optional) and `functions`,
  // then calls nvmlInit_v2. nullptr with `failure` set when a step fails; a required function
  // that is missing is reported before NVML is initialised.
  static std::unique_ptr<Library> open(std::initializer_list<Function> functions, OpenFailure& failure,
                                       const char* file = kLibraryName);
  // nvmlShutdown. The library stays loaded: NVML keeps threads of its own that must not lose
  // their code.
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // nvmlErrorString's text for `rc`, or "NVML error <rc>" where the library has none.
  std::string error_text(nvmlReturn_t rc) const;

 private:
  Library() = default;
  decltype(&nvmlShutdown) shutdown_ = nullptr;
  decltype(&nvmlErrorString) error_string_ = nullptr;
};

}  // namespace cuslice::nvml
