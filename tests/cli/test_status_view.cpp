// What `cuslice status` prints, from a hand-made snapshot.
#include "cli/status_view.h"

#include <gtest/gtest.h>

#include "cli/scheduler_autostart.h"

namespace cuslice::cli {
namespace {

SegmentSnapshot snapshot() {
  SegmentSnapshot s;
  s.abi_major = 1;
  s.abi_minor = 1;
  s.state = shm::DaemonState::kRunning;
  s.daemon_pid = 42;
  s.quantum_ns = 20'000'000;
  s.share_window_ns = 5'000'000'000;
  GpuSnapshot gpu;
  gpu.index = 0;
  gpu.memory_total = 16ull << 30;
  gpu.holder = 3;
  s.gpus.push_back(gpu);
  TenantSnapshot t;
  t.index = 3;
  t.name = "infer";
  t.priority = 2;
  t.share_ppm = 250'000;
  t.limit_ppm = 1'000'000;
  t.memory_quota_ppm = 250'000;
  t.pids = {7, 9};
  TenantGpuSnapshot use;
  use.memory_used = 512ull << 20;
  use.memory_quota = 4ull << 30;
  use.gpu_time_ns = 65'000'000'000;
  use.wait_ns = 1'200'000'000;
  use.achieved_share_ppm = 123'456;
  use.holds_token = true;
  t.gpus.push_back(use);
  s.tenants.push_back(t);
  return s;
}

TEST(StatusViewTest, JsonFollowsTheDocumentedSchema) {
  const nlohmann::json j = status_json(snapshot(), {"/s.sock", "/cuslice", true, "/etc/c.yaml", {}, {}});
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["daemon"]["mode"], "config");
  EXPECT_EQ(j["daemon"]["pid"], 42);
  EXPECT_EQ(j["daemon"]["config_path"], "/etc/c.yaml");
  EXPECT_DOUBLE_EQ(j["daemon"]["share_window_seconds"].get<double>(), 5.0);
  const auto& tenant = j["tenants"][0];
  EXPECT_EQ(tenant["priority"], "high");
  EXPECT_DOUBLE_EQ(tenant["memory_quota_fraction"].get<double>(), 0.25);
  EXPECT_TRUE(tenant["memory_quota_bytes"].is_null());
  EXPECT_EQ(tenant["pids"], nlohmann::json::array({7, 9}));
  const auto& gpu = j["gpus"][0];
  EXPECT_EQ(gpu["token_holder"], "infer");
  EXPECT_TRUE(gpu["uuid"].is_null());
  const auto& row = gpu["tenants"][0];
  EXPECT_EQ(row["memory_quota_bytes"], 4ull << 30);
  EXPECT_DOUBLE_EQ(row["gpu_seconds"].get<double>(), 65.0);
  EXPECT_DOUBLE_EQ(row["token_wait_seconds"].get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(row["achieved_share"].get<double>(), 0.123456);
  EXPECT_EQ(row["holds_token"], true);
}

TEST(StatusViewTest, TableShowsEachTenantOnEachGpu) {
  const std::string table = status_table(snapshot(), {"/s.sock", "/cuslice", false, std::nullopt, {}, {}});
  EXPECT_NE(table.find("(not answering)"), std::string::npos) << table;
  EXPECT_NE(table.find("token: infer"), std::string::npos) << table;
  EXPECT_NE(table.find("512 MiB / 4.00 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("12.3%"), std::string::npos) << table;  // achieved
  EXPECT_NE(table.find("1m05s"), std::string::npos) << table;  // GPU time
  EXPECT_NE(table.find("7,9"), std::string::npos) << table;
}

TEST(StatusViewTest, WatchdogFindingsAreShownOnlyWhenThereAreAny) {
  SegmentSnapshot s = snapshot();
  const DaemonView d{"/s.sock", "/cuslice", true, "/etc/c.yaml", {}, {}};
  EXPECT_EQ(status_table(s, d).find(" ! "), std::string::npos);
  s.gpus[0].unhooked_processes = 2;
  s.gpus[0].unhooked_bytes = 3ull << 30;
  s.tenants[0].gpus[0].over_quota_bytes = 1ull << 30;
  s.tenants[0].gpus[0].watchdog_kills = 1;
  const std::string table = status_table(s, d);
  EXPECT_NE(table.find("! 2 process(es) without the hook hold 3.00 GiB on this GPU"), std::string::npos) << table;
  EXPECT_NE(table.find("! infer holds 1.00 GiB beyond its quota"), std::string::npos) << table;
  EXPECT_NE(table.find("! infer: 1 process(es) killed"), std::string::npos) << table;
  const nlohmann::json j = status_json(s, d);
  EXPECT_EQ(j["gpus"][0]["unhooked_processes"], 2);
  EXPECT_EQ(j["gpus"][0]["unhooked_memory_bytes"], 3ull << 30);
  EXPECT_EQ(j["gpus"][0]["tenants"][0]["over_quota_bytes"], 1ull << 30);
  EXPECT_EQ(j["gpus"][0]["tenants"][0]["watchdog_kills"], 1);
}

TEST(StatusViewTest, AKubernetesTenantShowsItsPodAndContainer) {
  DaemonView d{"/s.sock", "/cuslice", true, "/etc/c.yaml", {}, {}};
  EXPECT_TRUE(status_json(snapshot(), d)["tenants"][0]["workload"].is_null());
  EXPECT_EQ(status_table(snapshot(), d).find("    pod "), std::string::npos);
  d.workloads["infer"] = {"team-a", "serve-7f9c", "main"};
  const nlohmann::json w = status_json(snapshot(), d)["tenants"][0]["workload"];
  EXPECT_EQ(w, (nlohmann::json{{"namespace", "team-a"}, {"pod", "serve-7f9c"}, {"container", "main"}}));
  EXPECT_NE(status_table(snapshot(), d).find("\n    pod team-a/serve-7f9c, container main\n"), std::string::npos);
}

TEST(StatusViewTest, ProcessesWithoutTheHookAreShownWithNoTenants) {
  SegmentSnapshot s = snapshot();
  s.tenants.clear();
  s.gpus[0].unhooked_processes = 1;
  s.gpus[0].unhooked_bytes = 3ull << 30;
  const std::string table = status_table(s, {"/s.sock", "/cuslice", true, "/etc/c.yaml"});
  EXPECT_NE(table.find("no tenants yet"), std::string::npos) << table;
  EXPECT_NE(table.find("! GPU 0: 1 process(es) without the hook hold 3.00 GiB"), std::string::npos) << table;
}

TEST(StatusViewTest, ASuspendedTenantShowsItsStateCountsAndWhy) {
  SegmentSnapshot s = snapshot();
  TenantSnapshot train = s.tenants[0];
  train.index = 4;
  train.name = "train";
  train.preemptible = true;
  train.suspension = shm::Tenant::kSuspended;
  train.suspensions = 2;
  train.suspended_ns = 75'000'000'000;
  train.suspend_ns = 9'000'000'000;
  train.gpus[0].bytes_moved = 24ull << 30;
  s.tenants.push_back(train);
  const DaemonView daemon{"/s.sock", "/cuslice", true, std::nullopt, {},
                          {{"train", "suspended for infer's allocation of 8.0 GiB on GPU 0"}}};
  const nlohmann::json j = status_json(s, daemon);
  const nlohmann::json& sus = j["tenants"][1]["suspension"];
  EXPECT_EQ(j["tenants"][1]["preemptible"], true);
  EXPECT_EQ(sus["state"], "suspended");
  EXPECT_EQ(sus["reason"], "suspended for infer's allocation of 8.0 GiB on GPU 0");
  EXPECT_EQ(sus["suspensions"], 2);
  EXPECT_DOUBLE_EQ(sus["suspended_seconds"].get<double>(), 75.0);
  EXPECT_DOUBLE_EQ(sus["suspend_seconds"].get<double>(), 9.0);
  EXPECT_EQ(j["tenants"][0]["suspension"]["reason"], nullptr);
  EXPECT_EQ(j["gpus"][0]["tenants"][1]["preemption_moved_bytes"], 24ull << 30);
  const std::string table = status_table(s, daemon);
  EXPECT_NE(table.find("PREEMPTION"), std::string::npos) << table;
  EXPECT_NE(table.find("suspended for infer's allocation"), std::string::npos) << table;
  EXPECT_NE(table.find("1m15s"), std::string::npos) << table;
  EXPECT_NE(table.find("24.0 GiB"), std::string::npos) << table;
  // Nothing about preemption where no tenant is preemptible and nothing is to be said.
  EXPECT_EQ(status_table(snapshot(), daemon).find("PREEMPTION"), std::string::npos);
}

TEST(StatusViewTest, Units) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20ull << 30), "20.0 GiB");
  EXPECT_EQ(format_seconds(0.44), "0.4s");
  EXPECT_EQ(format_seconds(245), "4m05s");
  EXPECT_EQ(format_seconds(7620), "2h07m");
}

TEST(StatusViewTest, APrivateSocketGetsItsOwnSegmentName) {
  EXPECT_EQ(shm_name_for_socket(wire::kDefaultSocketPath), "/cuslice");
  const std::string a = shm_name_for_socket("/tmp/a.sock");
  EXPECT_NE(a, "/cuslice");
  EXPECT_EQ(a, shm_name_for_socket("/tmp/a.sock"));
  EXPECT_NE(a, shm_name_for_socket("/tmp/b.sock"));
  EXPECT_LT(a.size(), shm::kNameSize);
}

}  // namespace
}  // namespace cuslice::cli
