// own_tenant_name (cli/own_tenant.h): each step of the rule, and that every name it makes is
// one the configuration accepts.
#include "cli/own_tenant.h"

#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "config/tenant_config.h"

namespace cuslice::cli {
namespace {

TEST(OwnTenantName, IsTheProgramsNameAndThePid) {
  EXPECT_EQ(own_tenant_name("python3", 4242), "python3-4242");
  EXPECT_EQ(own_tenant_name("/usr/bin/python3.11", 7), "python3.11-7");
  EXPECT_EQ(own_tenant_name("./train.py", 12), "train.py-12");
  EXPECT_EQ(own_tenant_name("run_all-v2", 1), "run_all-v2-1");
}

TEST(OwnTenantName, TwoRunsOfOneProgramDiffer) {
  EXPECT_NE(own_tenant_name("python3", 100), own_tenant_name("python3", 101));
}

TEST(OwnTenantName, EachRunOfOtherCharactersBecomesOneUnderscore) {
  EXPECT_EQ(own_tenant_name("my job (v2)", 3), "my_job_v2_-3");
  EXPECT_EQ(own_tenant_name("r\xc3\xa9sum\xc3\xa9", 3), "r_sum_-3");  // "résumé": é is two bytes
  EXPECT_EQ(own_tenant_name("a_ b", 3), "a__b-3");                    // a '_' of the name stays
  EXPECT_EQ(own_tenant_name("/opt/x y/bin/a:b", 3), "a_b-3");         // only the last component
}

TEST(OwnTenantName, AProgramWithNoNameIsCalledCommand) {
  EXPECT_EQ(own_tenant_name("", 9), "command-9");
  EXPECT_EQ(own_tenant_name("bin/", 9), "command-9");
}

TEST(OwnTenantName, ALongNameIsCutToKeepThePid) {
  const std::string name = own_tenant_name("/x/" + std::string(200, 'p'), 4194304);
  EXPECT_EQ(name.size(), kMaxTenantNameLength);
  EXPECT_EQ(name, std::string(kMaxTenantNameLength - 8, 'p') + "-4194304");
  EXPECT_EQ(own_tenant_name(std::string(kMaxTenantNameLength - 2, 'q'), 42).size(), kMaxTenantNameLength);
}

TEST(OwnTenantName, EveryNameIsOneTheConfigurationAccepts) {
  for (const char* program : {"python3", "", "/", "..", "a b", "\x01\x7f", "x/y/z", "-", "\xff\xfe"})
    for (const pid_t pid : {1, 4242, INT_MAX}) {
      const std::string name = own_tenant_name(program, pid);
      EXPECT_TRUE(valid_tenant_name(name)) << '"' << program << "\" -> \"" << name << '"';
      EXPECT_TRUE(name.ends_with("-" + std::to_string(pid))) << name;
    }
  EXPECT_TRUE(valid_tenant_name(own_tenant_name(std::string(300, '#'), INT_MAX)));
}

}  // namespace
}  // namespace cuslice::cli
