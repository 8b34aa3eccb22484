// Where the API server is and how the driver proves who it is (dra_plugin/kube_config.h).
#include "dra_plugin/kube_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cuslice::dra {
namespace {

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dra-kubeconfig-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
};

constexpr const char* kConfig = R"(apiVersion: v1
kind: Config
current-context: test
clusters:
  - name: other
    cluster: {server: "https://wrong:6443"}
  - name: lab
    cluster:
      server: https://10.0.0.1:6443
      certificate-authority: ca.crt
users:
  - name: driver
    user: {tokenFile: /var/run/token, client-certificate: /etc/c.crt, client-key: k.key}
contexts:
  - name: test
    context: {cluster: lab, user: driver}
)";

TEST_F(KubeConfigTest, TheCurrentContextsClusterAndUserWithPathsBesideTheFile) {
  std::string why;
  const auto c = load_kubeconfig(write("config", kConfig), why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_file, (dir_ / "ca.crt").string());
  EXPECT_EQ(c->token_file, "/var/run/token");
  EXPECT_EQ(c->client_cert_file, "/etc/c.crt");
  EXPECT_EQ(c->client_key_file, (dir_ / "k.key").string());
  EXPECT_FALSE(c->insecure);
}

TEST_F(KubeConfigTest, WhatCannotBeUsedIsRefusedWithAReason) {
  std::string config = kConfig;
  const auto refused = [&](const std::string& text, const std::string& expected) {
    std::string why;
    EXPECT_FALSE(load_kubeconfig(write("config", text), why)) << text;
    EXPECT_NE(why.find(expected), std::string::npos) << why;
  };
  refused(std::string(kConfig).replace(config.find("current-context: test"), 21, "current-context: nope"),
          "no current-context");
  refused(std::string(kConfig).replace(config.find("certificate-authority: ca.crt"), 29,
                                       "certificate-authority-data: AAAA"),
          "certificate-authority-data is not read");
  refused("clusters: [unclosed", "config");
  refused("", "not a kubeconfig");
  refused("current-context: test\n", "no current-context, or no context of that name");
  refused("current-context: test\ncontexts: [{name: test, context: {cluster: lab}}]\n", "cluster is missing");
  std::string why;
  EXPECT_FALSE(load_kubeconfig((dir_ / "missing").string(), why));
  EXPECT_FALSE(why.empty());
}

TEST_F(KubeConfigTest, InAPodTheServiceAccount) {
  std::string why;
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_FALSE(in_cluster_config(dir_.string(), why));
  EXPECT_NE(why.find("--kubeconfig"), std::string::npos);
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  EXPECT_FALSE(in_cluster_config(dir_.string(), why));  // no token yet
  EXPECT_NE(why.find("token"), std::string::npos);
  write("token", "t");
  const auto c = in_cluster_config(dir_.string(), why);
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
  EXPECT_EQ(c->token_file, (dir_ / "token").string());
  EXPECT_EQ(c->ca_file, (dir_ / "ca.crt").string());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
}

}  // namespace
}  // namespace cuslice::dra
