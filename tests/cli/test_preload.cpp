#include "cli/preload.h"

#include <gtest/gtest.h>

#include "cli/error.h"

namespace cuslice::cli {
namespace {

const std::filesystem::path kHook = "/opt/cuslice/lib/libcuslice.so";

TEST(AppendHookToPreload, EmptyPreloadBecomesTheHook) {
  EXPECT_EQ(append_hook_to_preload("", kHook), kHook.string());
}

TEST(AppendHookToPreload, AppendsAfterExistingEntriesKeepingThem) {
  EXPECT_EQ(append_hook_to_preload("/usr/lib/libjemalloc.so.2", kHook),
            "/usr/lib/libjemalloc.so.2:" + kHook.string());
  EXPECT_EQ(append_hook_to_preload("liba.so libb.so", kHook), "liba.so libb.so:" + kHook.string());
}

TEST(AppendHookToPreload, DoesNotDoubleATrailingSeparator) {
  EXPECT_EQ(append_hook_to_preload("liba.so:", kHook), "liba.so:" + kHook.string());
  EXPECT_EQ(append_hook_to_preload("liba.so ", kHook), "liba.so " + kHook.string());
}

TEST(AppendHookToPreload, LeavesAPreloadThatHasTheHookUnchanged) {
  const std::string same = "liba.so:" + kHook.string();
  EXPECT_EQ(append_hook_to_preload(same, kHook), same);
  // Another copy of the hook counts too: two interposers would count allocations twice.
  EXPECT_EQ(append_hook_to_preload("/elsewhere/libcuslice.so liba.so", kHook),
            "/elsewhere/libcuslice.so liba.so");
  EXPECT_EQ(append_hook_to_preload("libcuslice.so", kHook), "libcuslice.so");
}

TEST(AppendHookToPreload, NamesThatOnlyResembleTheHookDoNotCount) {
  EXPECT_FALSE(preload_has_hook("/lib/libcuslice.so.1"));
  EXPECT_FALSE(preload_has_hook("/lib/notlibcuslice.so"));
  EXPECT_FALSE(preload_has_hook("/libcuslice.so/liba.so"));
  EXPECT_TRUE(preload_has_hook("liba.so::/x/libcuslice.so"));
}

TEST(AppendHookToPreload, RefusesAHookPathLdSoWouldSplit) {
  for (const char* bad : {"/opt/my libs/libcuslice.so", "/opt/a:b/libcuslice.so"}) {
    try {
      append_hook_to_preload("", bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kFailure);
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cuslice::cli
