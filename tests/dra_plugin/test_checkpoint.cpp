// The DRA driver's record of its prepared claims (dra_plugin/checkpoint.h): what it writes it
// reads back, and a file it did not write is refused with a reason, never half read.
#include "dra_plugin/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace cuslice::dra {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dra-checkpoint-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "checkpoint.json").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(path_) << text; }

  std::filesystem::path dir_;
  std::string path_;
};

PreparedClaim two_gpu_claim() {
  PreparedClaim c;
  c.uid = "u-1";
  c.name_space = "ns";
  c.name = "pair";
  c.pod = "p";
  c.tenant = "dra-u-1";
  c.key = "0123456789abcdef0123456789abcdef";
  c.plan = {{2, 3}, uint64_t{6} << 30, 40};
  c.gpu_uuids = {"GPU-2", "GPU-3"};
  c.devices = {{"g", "node-a", "gpu-2", "s-2", std::nullopt, std::nullopt},
               {"g", "node-a", "gpu-3", std::nullopt, std::nullopt, std::nullopt}};
  return c;
}

TEST_F(CheckpointTest, WhatIsSavedIsLoadedAndOnlyItsOwnerMayReadIt) {
  Checkpoint saved(path_);
  saved.claims["u-1"] = two_gpu_claim();
  std::string why;
  ASSERT_TRUE(saved.save(why)) << why;
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // it holds credentials
  Checkpoint loaded(path_);
  ASSERT_TRUE(loaded.load(why)) << why;
  ASSERT_EQ(loaded.claims.count("u-1"), 1u);
  const PreparedClaim& c = loaded.claims.at("u-1");
  EXPECT_EQ(c.key, two_gpu_claim().key);
  EXPECT_EQ(c.plan.gpus, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(c.plan.memory_bytes, uint64_t{6} << 30);
  EXPECT_EQ(c.plan.compute_percent, 40u);
  EXPECT_EQ(c.devices[0].share_id, "s-2");
  EXPECT_FALSE(c.devices[1].share_id.has_value());
  EXPECT_EQ(holders(loaded.claims).at("node-a/gpu-2"), std::vector<std::string>{"u-1/s-2"});
  EXPECT_EQ(holders(loaded.claims).at("node-a/gpu-3"), std::vector<std::string>{"u-1"});
}

TEST_F(CheckpointTest, NoFileIsNoClaim) {
  Checkpoint c(path_);
  std::string why;
  EXPECT_TRUE(c.load(why));
  EXPECT_TRUE(c.claims.empty());
}

TEST_F(CheckpointTest, AFileItDidNotWriteIsRefusedWithAReason) {
  for (const char* text : {"", "not json", "[]", R"({"version": 2, "claims": {}})", R"({"version": 1})",
                           R"({"version": 1, "claims": {"u": {"namespace": "n"}}})",
                           R"({"version": 1, "claims": {"u": {"namespace": "n", "name": "c", "tenant": "t",
                               "key": "k", "gpus": [0, 1], "gpuUUIDs": ["GPU-0"], "memory": 1, "compute": 1,
                               "devices": []}}})",
                           R"({"version": 1, "claims": {"u": {"namespace": 5}}})"}) {
    write(text);
    Checkpoint c(path_);
    std::string why;
    EXPECT_FALSE(c.load(why)) << text;
    EXPECT_NE(why.find(path_), std::string::npos) << why;
    EXPECT_TRUE(c.claims.empty()) << text;
  }
}

}  // namespace
}  // namespace cuslice::dra
