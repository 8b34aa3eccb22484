// The Prometheus text rendered from a snapshot: names, types, labels, units.
#include "scheduler/metrics/metrics_exposition.h"

#include <gtest/gtest.h>

namespace cuslice {
namespace {

SegmentSnapshot two_tenants_one_gpu() {
  SegmentSnapshot s;
  GpuSnapshot gpu;
  gpu.index = 0;
  gpu.memory_total = 80ull << 30;
  gpu.uuid = "GPU-00112233-4455-6677-8899-aabbccddeeff";
  gpu.holder = 0;
  gpu.handoffs = 7;
  s.gpus.push_back(gpu);

  TenantSnapshot a;
  a.index = 0;
  a.name = "train";
  a.share_ppm = 600'000;
  a.limit_ppm = 800'000;
  a.memory_quota_bytes = 20ull << 30;
  a.pids = {100, 101};
  TenantGpuSnapshot use;
  use.memory_used = 1ull << 30;
  use.memory_quota = 20ull << 30;
  use.gpu_time_ns = 1'500'000'000;
  use.wait_ns = 250'000'000;
  use.oom_refusals = 3;
  use.token_grants = 4;
  use.achieved_share_ppm = 550'000;
  use.holds_token = true;
  a.gpus.push_back(use);
  s.tenants.push_back(a);

  TenantSnapshot b;
  b.index = 1;
  b.name = "we\"ird";
  b.share_ppm = 400'000;
  b.gpus.push_back(TenantGpuSnapshot{});
  s.tenants.push_back(b);
  return s;
}

TEST(MetricsExpositionTest, SamplesCarryBaseUnitsAndTheGpuUuid) {
  const std::string text = render_metrics(two_tenants_one_gpu());
  const std::string labels = "{tenant=\"train\",gpu=\"GPU-00112233-4455-6677-8899-aabbccddeeff\"}";
  for (const std::string& line : {
           "cuslice_tenant_memory_used_bytes" + labels + " 1073741824",
           "cuslice_tenant_memory_quota_bytes" + labels + " 21474836480",
           "cuslice_tenant_gpu_seconds_total" + labels + " 1.5",
           "cuslice_tenant_token_wait_seconds_total" + labels + " 0.25",
           "cuslice_tenant_oom_refusals_total" + labels + " 3",
           "cuslice_tenant_token_grants_total" + labels + " 4",
           "cuslice_tenant_achieved_share_ratio" + labels + " 0.55",
           "cuslice_tenant_token_held" + labels + " 1",
           std::string("cuslice_tenant_processes{tenant=\"train\"} 2"),
           std::string("cuslice_tenant_share_ratio{tenant=\"train\"} 0.6"),
           std::string("cuslice_tenant_limit_ratio{tenant=\"train\"} 0.8"),
           std::string("cuslice_gpu_token_handoffs_total{gpu=\"GPU-00112233-4455-6677-8899-aabbccddeeff\"} 7"),
       })
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\nin:\n" << text;
}

TEST(MetricsExpositionTest, KnownWorkloadFieldsBecomeLabels) {
  TenantWorkloads workloads;
  workloads["train"] = {"ml", "trainer-7f9c", ""};  // container unknown: no label
  const std::string text = render_metrics(two_tenants_one_gpu(), workloads);
  EXPECT_NE(text.find("cuslice_tenant_memory_used_bytes{tenant=\"train\",gpu=\"GPU-00112233-4455-6677-8899-"
                      "aabbccddeeff\",namespace=\"ml\",pod=\"trainer-7f9c\"} 1073741824\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cuslice_tenant_processes{tenant=\"train\",namespace=\"ml\",pod=\"trainer-7f9c\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("container="), std::string::npos);
  // A tenant without a workload keeps only its own labels.
  EXPECT_NE(text.find("cuslice_tenant_processes{tenant=\"we\\\"ird\"} 0\n"), std::string::npos) << text;
}

TEST(MetricsExpositionTest, EveryFamilyIsTypedOnceBeforeItsSamples) {
  const std::string text = render_metrics(two_tenants_one_gpu());
  EXPECT_NE(text.find("# TYPE cuslice_tenant_gpu_seconds_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE cuslice_tenant_memory_used_bytes gauge\n"), std::string::npos);
  const size_t type = text.find("# TYPE cuslice_tenant_oom_refusals_total");
  const size_t sample = text.find("cuslice_tenant_oom_refusals_total{");
  EXPECT_LT(type, sample);
  EXPECT_EQ(text.find("# TYPE cuslice_tenant_oom_refusals_total", type + 1), std::string::npos);
}

TEST(MetricsExpositionTest, AQuotaThatCannotBeResolvedIsLeftOutNotZero) {
  const std::string text = render_metrics(two_tenants_one_gpu());
  EXPECT_EQ(text.find("cuslice_tenant_memory_quota_bytes{tenant=\"we\\\"ird\""), std::string::npos);
  EXPECT_NE(text.find("cuslice_tenant_memory_used_bytes{tenant=\"we\\\"ird\""), std::string::npos);
}

TEST(MetricsExpositionTest, WithoutAUuidTheGpuIsNamedByIndex) {
  SegmentSnapshot s = two_tenants_one_gpu();
  s.gpus[0].uuid.reset();
  const std::string text = render_metrics(s);
  EXPECT_NE(text.find("cuslice_gpu_token_handoffs_total{gpu=\"0\"} 7\n"), std::string::npos) << text;
}

TEST(MetricsExpositionTest, NoPidLabel) {
  EXPECT_EQ(render_metrics(two_tenants_one_gpu()).find("pid="), std::string::npos);
}

}  // namespace
}  // namespace cuslice
