// The fake exports exactly the driver's names (plus its fake_cuda_ control API).
#include <cstdio>
#include <set>
#include <string>

#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

std::set<std::string> exported_names(const std::string& library) {
  std::set<std::string> names;
  std::string command = std::string(FAKE_TEST_NM) + " -D --defined-only " + library;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return names;
  char address[64], type[8], name[256];
  while (std::fscanf(pipe, "%63s %7s %255s", address, type, name) == 3) names.insert(name);
  pclose(pipe);
  return names;
}

std::set<std::string> with_prefix(const std::set<std::string>& names, const std::string& prefix) {
  std::set<std::string> selected;
  for (const auto& name : names) {
    if (name.rfind(prefix, 0) == 0) selected.insert(name);
  }
  return selected;
}

TEST(Exports, CuNamesEqualTheStubsExactly) {
  const auto stub = exported_names(FAKE_TEST_STUB);
  const auto fake = exported_names(FAKE_TEST_LIBCUDA);
  ASSERT_EQ(stub.size(), 637u) << "a new toolkit: check the fake's model still holds";
  EXPECT_EQ(with_prefix(fake, "cu"), with_prefix(stub, "cu"));
}

TEST(Exports, NothingButDriverNamesAndTheControlApi) {
  const auto fake = exported_names(FAKE_TEST_LIBCUDA);
  const auto driver = with_prefix(fake, "cu");
  const auto control = with_prefix(fake, "fake_cuda_");
  EXPECT_FALSE(control.empty());
  EXPECT_EQ(driver.size() + control.size(), fake.size());
}

TEST_F(FakeDriverTest, UnimplementedEntryPointsReturnNotSupported) {
  char luid[8];
  unsigned int mask = 0;
  EXPECT_EQ(cuDeviceGetLuid(luid, &mask, 0), CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
