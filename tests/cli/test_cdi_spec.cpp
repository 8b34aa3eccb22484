#include "cli/cdi_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cuslice::cli {
namespace {

CdiSpecInput example_input() {
  CdiSpecInput input;
  input.hook_host_path = "/usr/local/lib/libcuslice.so";
  input.socket_host_dir = "/run/cuslice";
  input.shm_name = "/cuslice";
  return input;
}

TEST(MakeCdiSpec, DescribesOneDeviceThatMountsTheHookSocketDirectoryAndSegment) {
  const auto spec = make_cdi_spec(example_input());
  EXPECT_EQ(spec["cdiVersion"], kCdiVersion);
  EXPECT_EQ(spec["kind"], "cuslice.io/gpu");
  ASSERT_EQ(spec["devices"].size(), 1u);
  const auto& device = spec["devices"][0];
  EXPECT_EQ(device["name"], "all");

  const auto& mounts = device["containerEdits"]["mounts"];
  ASSERT_EQ(mounts.size(), 3u);
  EXPECT_EQ(mounts[0]["hostPath"], "/usr/local/lib/libcuslice.so");
  EXPECT_EQ(mounts[0]["containerPath"], kContainerHookPath);
  EXPECT_EQ(mounts[0]["options"][0], "ro");
  EXPECT_EQ(mounts[1]["hostPath"], "/run/cuslice");
  EXPECT_EQ(mounts[1]["containerPath"], "/run/cuslice");
  EXPECT_EQ(mounts[2]["hostPath"], "/dev/shm/cuslice");
  EXPECT_EQ(mounts[2]["containerPath"], "/dev/shm/cuslice");

  const auto& env = device["containerEdits"]["env"];
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0], std::string("LD_PRELOAD=") + kContainerHookPath);
  EXPECT_EQ(env[1], "CUSLICE_SOCKET=/run/cuslice/cuslice.sock");
}

TEST(MakeCdiSpec, UsesTheGivenDeviceNameAndPaths) {
  CdiSpecInput input = example_input();
  input.device_name = "slot-1";
  input.hook_host_path = "/opt/x/libcuslice.so";
  input.socket_host_dir = "/var/run/other";
  input.shm_name = "/cuslice-b";
  const auto spec = make_cdi_spec(input);
  EXPECT_EQ(spec["devices"][0]["name"], "slot-1");
  const auto& mounts = spec["devices"][0]["containerEdits"]["mounts"];
  EXPECT_EQ(mounts[0]["hostPath"], "/opt/x/libcuslice.so");
  EXPECT_EQ(mounts[1]["hostPath"], "/var/run/other");
  EXPECT_EQ(mounts[1]["containerPath"], "/run/cuslice");  // where the hook looks by default
  EXPECT_EQ(mounts[2]["hostPath"], "/dev/shm/cuslice-b");
}

TEST(CdiDeviceName, AcceptsCdiNamesAndExplainsOthers) {
  for (const char* good : {"all", "0", "slot-1", "a_b.c:d"})
    EXPECT_EQ(cdi_device_name_problem(good), "") << good;
  for (const char* bad : {"", "-all", ".x", "a b", "a/b", "gpu=0"})
    EXPECT_NE(cdi_device_name_problem(bad), "") << bad;
}

TEST(ShmName, AcceptsWhatShmOpenAndTheProtocolAccept) {
  EXPECT_EQ(shm_name_problem("/cuslice"), "");
  for (const std::string& bad :
       std::vector<std::string>{"", "/", "cuslice", "/a/b", "/" + std::string(80, 'x')})
    EXPECT_NE(shm_name_problem(bad), "") << bad;
}

}  // namespace
}  // namespace cuslice::cli
