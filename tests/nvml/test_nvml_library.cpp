// nvml::Library with the fake NVML: what it finds, what it leaves null, which step fails and
// what it says, and that NVML is initialised exactly while a Library lives.
#include <dlfcn.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include "nvml/nvml_library.h"

namespace cuslice::nvml {
namespace {

// NVML's own answer to "are you initialised?", through a handle of our own on the same library.
nvmlReturn_t device_count(unsigned int* count) {
  void* handle = dlopen(kLibraryName, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return NVML_ERROR_UNKNOWN;
  const auto count_fn = reinterpret_cast<decltype(&nvmlDeviceGetCount_v2)>(dlsym(handle, "nvmlDeviceGetCount_v2"));
  return count_fn != nullptr ? count_fn(count) : NVML_ERROR_FUNCTION_NOT_FOUND;
}

// Stands in the slot of an optional function before open(), to see that it is overwritten.
nvmlReturn_t not_found_yet(nvmlDevice_t, unsigned int*) { return NVML_ERROR_UNKNOWN; }

TEST(NvmlLibrary, FindsTheFunctionsAndInitialisesNvmlWhileItLives) {
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetMinorNumber) minor = not_found_yet;  // the fake has none
  OpenFailure failure;
  std::unique_ptr<Library> nvml =
      Library::open({{"nvmlDeviceGetCount_v2", count}, {"nvmlDeviceGetMinorNumber", minor, Need::kOptional}}, failure);
  ASSERT_NE(nvml, nullptr) << failure.text();
  ASSERT_NE(count, nullptr);
  EXPECT_EQ(minor, nullptr) << "an optional function the library lacks is left null";
  unsigned int n = 0;
  EXPECT_EQ(count(&n), NVML_SUCCESS);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(nvml->error_text(NVML_ERROR_NOT_FOUND), "Not Found");
  nvml.reset();
  // Shut down, and still loaded: the function found before is still there to answer.
  EXPECT_EQ(count(&n), NVML_ERROR_UNINITIALIZED);
}

TEST(NvmlLibrary, TwoAtOnceEachHoldNvml) {
  OpenFailure failure;
  std::unique_ptr<Library> first = Library::open({}, failure);
  std::unique_ptr<Library> second = Library::open({}, failure);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  first.reset();
  unsigned int n = 0;
  EXPECT_EQ(device_count(&n), NVML_SUCCESS);
  second.reset();
  EXPECT_EQ(device_count(&n), NVML_ERROR_UNINITIALIZED);
}

TEST(NvmlLibrary, AMissingLibraryIsNamedWithTheLoadersReason) {
  OpenFailure failure;
  EXPECT_EQ(Library::open({}, failure, "libnvidia-ml-not-here.so.1"), nullptr);
  EXPECT_EQ(failure.step, OpenFailure::Step::kLoad);
  EXPECT_NE(failure.detail.find("libnvidia-ml-not-here.so.1"), std::string::npos) << failure.detail;
  EXPECT_EQ(failure.text(), "cannot load libnvidia-ml-not-here.so.1: " + failure.detail);
}

TEST(NvmlLibrary, AMissingRequiredFunctionIsNamedAndNvmlIsNotInitialised) {
  decltype(&nvmlDeviceGetCount_v2) count = nullptr;
  decltype(&nvmlDeviceGetMinorNumber) minor = nullptr;
  OpenFailure failure;
  EXPECT_EQ(Library::open({{"nvmlDeviceGetCount_v2", count}, {"nvmlDeviceGetMinorNumber", minor}}, failure), nullptr);
  EXPECT_EQ(failure.step, OpenFailure::Step::kResolve);
  EXPECT_EQ(failure.detail, "nvmlDeviceGetMinorNumber");
  EXPECT_EQ(failure.text(), "libnvidia-ml.so.1 lacks nvmlDeviceGetMinorNumber");
  unsigned int n = 0;
  EXPECT_EQ(device_count(&n), NVML_ERROR_UNINITIALIZED);
}

TEST(NvmlLibrary, ALibraryThatIsNotNvmlLacksNvmlInit) {
  OpenFailure failure;
  EXPECT_EQ(Library::open({}, failure, "libc.so.6"), nullptr);
  EXPECT_EQ(failure.step, OpenFailure::Step::kResolve);
  EXPECT_EQ(failure.text(), "libc.so.6 lacks nvmlInit_v2");
}

TEST(NvmlLibrary, AFailedInitSaysNvmlsReason) {
  setenv("FAKE_NVML_INIT_ERROR", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  OpenFailure failure;
  std::unique_ptr<Library> nvml = Library::open({}, failure);
  unsetenv("FAKE_NVML_INIT_ERROR");
  EXPECT_EQ(nvml, nullptr);
  EXPECT_EQ(failure.step, OpenFailure::Step::kInit);
  EXPECT_EQ(failure.text(), "nvmlInit failed: Driver Not Loaded");
  unsigned int n = 0;
  EXPECT_EQ(device_count(&n), NVML_ERROR_UNINITIALIZED);
}

}  // namespace
}  // namespace cuslice::nvml
