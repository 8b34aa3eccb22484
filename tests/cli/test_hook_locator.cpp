#include "cli/hook_locator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "cli/error.h"

namespace cuslice::cli {
namespace {
namespace fs = std::filesystem;

// A scratch installation: <root>/bin/cuslice with optional lib/ and hook/ beside bin/.
class HookLocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cuslice-hook-locator-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    fs::create_directories(root_ / "bin");
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path make_file(const fs::path& relative) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "stand-in";
    return path;
  }

  HookSearch search() const {
    HookSearch s;
    s.explicit_flag = "--hook";
    s.executable = root_ / "bin" / "cuslice";
    return s;
  }

  // The message of the Error that locate_hook throws, or "" if it did not throw.
  static std::string error_of(const HookSearch& s) {
    try {
      locate_hook(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kFailure);
      EXPECT_FALSE(e.hint().empty());
      return e.what();
    }
    return "";
  }

  fs::path root_;
};

TEST_F(HookLocatorTest, FindsTheInstalledLayoutBeforeTheBuildTree) {
  const fs::path installed = make_file("lib/libcuslice.so");
  make_file("hook/libcuslice.so");
  EXPECT_EQ(locate_hook(search()), installed);
}

TEST_F(HookLocatorTest, FindsTheBuildTreeLayout) {
  const fs::path built = make_file("hook/libcuslice.so");
  EXPECT_EQ(locate_hook(search()), built);
}

TEST_F(HookLocatorTest, EnvironmentBeatsTheLayoutAndTheFlagBeatsBoth) {
  make_file("lib/libcuslice.so");
  const fs::path from_env = make_file("env/libcuslice.so");
  const fs::path from_flag = make_file("flag/libcuslice.so");
  HookSearch s = search();
  s.env_path = from_env;
  EXPECT_EQ(locate_hook(s), from_env);
  s.explicit_path = from_flag;
  EXPECT_EQ(locate_hook(s), from_flag);
}

TEST_F(HookLocatorTest, ANamedPathThatIsMissingIsAnErrorNotAFallThrough) {
  make_file("lib/libcuslice.so");
  HookSearch s = search();
  s.explicit_path = root_ / "missing.so";
  const std::string flag_error = error_of(s);
  EXPECT_NE(flag_error.find("missing.so"), std::string::npos) << flag_error;
  EXPECT_NE(flag_error.find("--hook"), std::string::npos) << flag_error;

  s.explicit_path.reset();
  s.env_path = root_ / "lib";  // a directory
  const std::string env_error = error_of(s);
  EXPECT_NE(env_error.find("CUSLICE_HOOK_PATH"), std::string::npos) << env_error;
  EXPECT_NE(env_error.find("not a regular file"), std::string::npos) << env_error;
}

TEST_F(HookLocatorTest, NothingFoundNamesEveryPlaceLooked) {
  const std::string message = error_of(search());
  EXPECT_NE(message.find((root_ / "lib/libcuslice.so").string()), std::string::npos) << message;
  EXPECT_NE(message.find((root_ / "hook/libcuslice.so").string()), std::string::npos) << message;
}

TEST_F(HookLocatorTest, ARelativeNamedPathBecomesAbsolute) {
  make_file("rel/libcuslice.so");
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);
  HookSearch s = search();
  s.explicit_path = "rel/./libcuslice.so";
  const fs::path found = locate_hook(s);
  fs::current_path(cwd);
  EXPECT_EQ(found, root_ / "rel/libcuslice.so");
}

}  // namespace
}  // namespace cuslice::cli
