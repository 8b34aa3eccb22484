// nvml::Library: dlopen of libnvidia-ml.so.1, dlsym of the functions its users name, and
// NVML's init/shutdown pairing (nvml_library.h says why at run time and not at link time).
#include "nvml/nvml_library.h"

#include <dlfcn.h>

namespace cuslice::nvml {
namespace {

std::string text_of(decltype(&nvmlErrorString) error_string, nvmlReturn_t rc) {
  if (error_string != nullptr) {
    if (const char* text = error_string(rc); text != nullptr) return text;
  }
  return "NVML error " + std::to_string(static_cast<int>(rc));
}

}  // namespace

std::string OpenFailure::text() const {
  switch (step) {
    case Step::kLoad: return "cannot load " + library + ": " + detail;
    case Step::kResolve: return library + " lacks " + detail;
    case Step::kInit: return "nvmlInit failed: " + detail;
  }
  return detail;
}

std::unique_ptr<Library> Library::open(std::initializer_list<Function> functions, OpenFailure& failure,
                                       const char* file) {
  const auto fail = [&](OpenFailure::Step step, std::string detail) {
    failure = OpenFailure{step, file, std::move(detail)};
    return nullptr;
  };
  // Never dlclose'd, on failure either: see ~Library.
  void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return fail(OpenFailure::Step::kLoad, why != nullptr ? why : "unknown error");
  }
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  const char* missing = nullptr;
  const auto resolve = [&](const Function& f) {
    void* address = dlsym(handle, f.name());
    if (address == nullptr && f.need() == Need::kRequired) missing = f.name();
    f.assign(address);
    return missing == nullptr;
  };
  for (const Function& f : {Function("nvmlInit_v2", init), Function("nvmlShutdown", shutdown),
                            Function("nvmlErrorString", error_string, Need::kOptional)}) {
    if (!resolve(f)) return fail(OpenFailure::Step::kResolve, missing);
  }
  for (const Function& f : functions) {
    if (!resolve(f)) return fail(OpenFailure::Step::kResolve, missing);
  }
  if (const nvmlReturn_t rc = init(); rc != NVML_SUCCESS) {
    return fail(OpenFailure::Step::kInit, text_of(error_string, rc));
  }
  std::unique_ptr<Library> library(new Library);
  library->shutdown_ = shutdown;
  library->error_string_ = error_string;
  return library;
}

Library::~Library() { shutdown_(); }

std::string Library::error_text(nvmlReturn_t rc) const { return text_of(error_string_, rc); }

}  // namespace cuslice::nvml
