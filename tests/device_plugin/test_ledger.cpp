// The device plugin's decisions (device_plugin/ledger.h): what is advertised, where memory
// goes, what Allocate accepts and refuses, and how PodResources links and removes tenants.
#include "ledger.h"

#include <gtest/gtest.h>

#include "device_ids.h"

namespace cuslice::device_plugin {
namespace {

constexpr uint64_t GiB = uint64_t{1} << 30;

std::string uuid(int i) { return "GPU-0000000" + std::to_string(i) + "-0000-0000-0000-000000000000"; }

Ledger ledger_with(int gpus, uint64_t memory = 16 * GiB, LedgerOptions options = {}) {
  Ledger l(options);
  std::vector<Gpu> list;
  for (int i = 0; i < gpus; ++i) list.push_back({static_cast<uint32_t>(i), uuid(i), memory, 0, true});
  l.set_gpus(list);
  l.set_scheduler_reachable(true);
  return l;
}

std::vector<std::string> ids(int gpu, std::initializer_list<uint32_t> units) {
  std::vector<std::string> out;
  for (uint32_t u : units) out.push_back(memory_id(uuid(gpu), u));
  return out;
}

std::vector<std::string> all_ids(const std::vector<Device>& devices) {
  std::vector<std::string> out;
  for (const Device& d : devices) out.push_back(d.id);
  return out;
}

size_t healthy(const std::vector<Device>& devices) {
  size_t n = 0;
  for (const Device& d : devices) n += d.healthy;
  return n;
}

TEST(DeviceIds, RoundTrip) {
  const auto m = parse_memory_id(memory_id(uuid(3), 17));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->gpu_uuid, uuid(3));
  EXPECT_EQ(m->unit, 17u);
  EXPECT_EQ(parse_compute_id(compute_id(250)), 250u);
  EXPECT_FALSE(parse_memory_id("GPU-x-m07"));  // one spelling per ID
  EXPECT_FALSE(parse_memory_id("-m3"));
  EXPECT_FALSE(parse_compute_id("c"));
  EXPECT_FALSE(parse_compute_id("c-1"));
  EXPECT_LE(memory_id(uuid(0), 511).size(), 63u);  // the kubelet's limit
}

TEST(Ledger, AdvertisesOneMemoryIdPerGibAndOneComputeIdPerPercentPerGpu) {
  for (int gpus : {1, 2, 8}) {
    Ledger l = ledger_with(gpus);
    EXPECT_EQ(l.memory_devices().size(), 16u * gpus);
    EXPECT_EQ(healthy(l.memory_devices()), 16u * gpus);
    EXPECT_EQ(l.compute_devices().size(), 100u * gpus);
    EXPECT_EQ(healthy(l.compute_devices()), 100u * gpus);
  }
}

TEST(Ledger, CapacityIsWhatIsNotHeldBackRoundedDown) {
  Ledger l = ledger_with(2, 80 * GiB - 400 * (GiB >> 10));  // an H100's 79.6 GiB
  EXPECT_EQ(l.capacity_units(l.gpus()[0]), 79u);
  l.set_held_back(1, 20 * GiB + 1);
  EXPECT_EQ(l.capacity_units(l.gpus()[1]), 59u);  // 59.6 GiB left
  EXPECT_EQ(l.memory_devices().size(), 79u + 59u);
}

TEST(Ledger, EverythingIsUnhealthyWithoutTheScheduler) {
  Ledger l = ledger_with(2);
  l.set_scheduler_reachable(false);
  EXPECT_EQ(healthy(l.memory_devices()), 0u);
  EXPECT_EQ(healthy(l.compute_devices()), 0u);
  l.set_scheduler_reachable(true);
  EXPECT_EQ(healthy(l.memory_devices()), 32u);
}

TEST(Ledger, AGpuThatDisappearsTurnsUnhealthyAndComesBack) {
  Ledger l = ledger_with(2);
  l.set_gpus({{0, uuid(0), 16 * GiB, 0, true}});
  EXPECT_EQ(l.memory_devices().size(), 32u);  // still listed
  EXPECT_EQ(healthy(l.memory_devices()), 16u);
  EXPECT_EQ(healthy(l.compute_devices()), 100u);
  EXPECT_NE(l.allocate_memory(ids(1, {0}), Clock::now(), "t", "k").error, "");
  l.set_gpus({{0, uuid(0), 16 * GiB, 0, true}, {1, uuid(1), 16 * GiB, 0, true}});
  EXPECT_EQ(healthy(l.memory_devices()), 32u);
}

TEST(Ledger, PreferredMemoryIsOnOneGpuTheOneThatFitsBest) {
  Ledger l = ledger_with(3);
  // GPU 0: 16 free, GPU 1: 10 free, GPU 2: 4 free.
  std::vector<std::string> available = all_ids(l.memory_devices());
  const auto drop = [&](int gpu, uint32_t from) {
    std::erase_if(available, [&](const std::string& id) {
      const auto m = parse_memory_id(id);
      return m->gpu_uuid == uuid(gpu) && m->unit >= from;
    });
  };
  drop(1, 10);
  drop(2, 4);
  const auto on_gpu = [](const std::vector<std::string>& chosen) {
    std::set<std::string> gpus;
    for (const std::string& id : chosen) gpus.insert(parse_memory_id(id)->gpu_uuid);
    return gpus;
  };
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 8)), std::set<std::string>{uuid(1)});
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 4)), std::set<std::string>{uuid(2)});
  EXPECT_EQ(on_gpu(l.preferred_memory(available, {}, 12)), std::set<std::string>{uuid(0)});
  EXPECT_EQ(l.preferred_memory(available, {}, 12).size(), 12u);
  EXPECT_TRUE(l.preferred_memory(available, {}, 17).empty());  // no single GPU: Allocate explains
  // must_include pins the GPU and comes first.
  const auto pinned = l.preferred_memory(available, ids(0, {5}), 3);
  ASSERT_EQ(pinned.size(), 3u);
  EXPECT_EQ(pinned[0], memory_id(uuid(0), 5));
  EXPECT_EQ(on_gpu(pinned), std::set<std::string>{uuid(0)});
}

TEST(Ledger, AllocateMakesOneTenantPerCallAndAnswersARepeatTheSame) {
  Ledger l = ledger_with(2);
  const auto now = Clock::now();
  auto first = l.allocate_memory(ids(1, {0, 1, 2}), now, "k8s-a", "key-a");
  ASSERT_TRUE(first.allocation) << first.error;
  EXPECT_TRUE(first.created);
  EXPECT_EQ(first.allocation->memory_bytes(), 3 * GiB);
  EXPECT_EQ(first.allocation->gpu, 1u);
  auto again = l.allocate_memory(ids(1, {2, 1, 0}), now, "k8s-b", "key-b");
  ASSERT_TRUE(again.allocation);
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.allocation->tenant, "k8s-a");
  EXPECT_EQ(l.used_units(1), (std::set<uint32_t>{0, 1, 2}));
}

TEST(Ledger, MemoryOnTwoGpusIsRefusedNamingTheRequestAndEachGpusFreeMemory) {
  Ledger l = ledger_with(2);
  ASSERT_TRUE(l.allocate_memory(ids(0, {0, 1, 2, 3, 4, 5}), Clock::now(), "k8s-a", "k").allocation);
  std::vector<std::string> request = ids(0, {6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  for (uint32_t u = 0; u < 10; ++u) request.push_back(memory_id(uuid(1), u));
  const auto refused = l.allocate_memory(request, Clock::now(), "k8s-b", "k");
  EXPECT_FALSE(refused.allocation);
  EXPECT_NE(refused.error.find("20 GiB asked for"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("GPU 0 (" + uuid(0) + "): 10 GiB free of 16 GiB"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("GPU 1 (" + uuid(1) + "): 16 GiB free of 16 GiB"), std::string::npos) << refused.error;
  EXPECT_EQ(l.allocations().size(), 1u);
}

TEST(Ledger, AllocateRefusesIdsItNeverAdvertised) {
  Ledger l = ledger_with(1);
  EXPECT_NE(l.allocate_memory({"GPU-unknown-m0"}, Clock::now(), "t", "k").error, "");
  EXPECT_NE(l.allocate_memory({"c3"}, Clock::now(), "t", "k").error, "");
  EXPECT_NE(l.allocate_memory({}, Clock::now(), "t", "k").error, "");
  EXPECT_EQ(l.check_compute({"c0", "c99"}), "");
  EXPECT_NE(l.check_compute({"c100"}), "");  // one GPU: c0 to c99
  EXPECT_NE(l.check_compute({memory_id(uuid(0), 0)}), "");
}

Holding holding(const char* pod, const char* container, std::vector<std::string> memory, size_t compute = 0,
                uint32_t compute_from = 0) {
  Holding h{{"ns", pod, container}, std::move(memory), {}};
  for (size_t i = 0; i < compute; ++i) h.compute_ids.push_back(compute_id(compute_from + i));
  return h;
}

TEST(Ledger, PodResourcesLinksMemoryToItsContainerAndCompute) {
  Ledger l = ledger_with(1);
  const auto t0 = Clock::now();
  const Allocation* a = l.allocate_memory(ids(0, {0, 1, 2, 3, 4, 5, 6, 7}), t0, "k8s-a", "k").allocation;
  const Allocation* b = l.allocate_memory(ids(0, {8, 9}), t0, "k8s-b", "k").allocation;
  // Before PodResources says anything: both get an equal part of the GPU.
  EXPECT_EQ(l.share_ppm(*a), 500'000u);
  auto r = l.reconcile({holding("p1", "c", ids(0, {0, 1, 2, 3, 4, 5, 6, 7}), 30), holding("p2", "c", ids(0, {8, 9}))},
                       t0);
  EXPECT_TRUE(r.removed.empty());
  EXPECT_EQ(a->workload, (Workload{"ns", "p1", "c"}));
  EXPECT_EQ(a->compute_percent, 30u);
  EXPECT_EQ(l.share_ppm(*a), 300'000u);
  EXPECT_EQ(l.share_ppm(*b), 700'000u);  // what compute leaves
  EXPECT_EQ(l.limit_ppm(*a), 1'000'000u);  // shares, not caps, by default
}

TEST(Ledger, CapComputeMakesTheShareACap) {
  LedgerOptions o;
  o.cap_compute = true;
  Ledger l = ledger_with(1, 16 * GiB, o);
  const Allocation* a = l.allocate_memory(ids(0, {0}), Clock::now(), "k8s-a", "k").allocation;
  l.reconcile({holding("p", "c", ids(0, {0}), 25)}, Clock::now());
  EXPECT_EQ(l.limit_ppm(*a), 250'000u);
}

TEST(Ledger, DefaultSharesAreAtLeastOnePercentWhenComputeIsOverbooked) {
  Ledger l = ledger_with(2);
  const auto t = Clock::now();
  l.allocate_memory(ids(0, {0}), t, "a", "k");
  l.allocate_memory(ids(0, {1}), t, "b", "k");
  l.allocate_memory(ids(0, {2}), t, "c", "k");
  l.allocate_memory(ids(1, {0}), t, "d", "k");
  // Compute IDs are not tied to a GPU: 80% + 70% can land on one.
  l.reconcile({holding("a", "c", ids(0, {0}), 80, 0), holding("b", "c", ids(0, {1}), 70, 80),
               holding("c", "c", ids(0, {2})), holding("d", "c", ids(1, {0}))},
              t);
  EXPECT_EQ(l.share_ppm(l.allocations().at("a")), 800'000u);
  EXPECT_EQ(l.share_ppm(l.allocations().at("b")), 700'000u);
  EXPECT_EQ(l.share_ppm(l.allocations().at("c")), 10'000u);
  EXPECT_EQ(l.share_ppm(l.allocations().at("d")), 1'000'000u);  // alone on GPU 1
}

TEST(Ledger, AContainerGoneFromPodResourcesLosesItsTenantAfterTheRemovalDelay) {
  LedgerOptions o;
  o.removal_delay = std::chrono::seconds(2);
  Ledger l = ledger_with(1, 16 * GiB, o);
  const auto t0 = Clock::now();
  l.allocate_memory(ids(0, {0, 1}), t0, "k8s-a", "k");
  l.reconcile({holding("p", "c", ids(0, {0, 1}))}, t0);
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(1)).removed.empty());
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::milliseconds(2500)).removed.empty());  // gone 1.5 s
  // Back in a later snapshot: the count starts again.
  l.reconcile({holding("p", "c", ids(0, {0, 1}))}, t0 + std::chrono::seconds(3));
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(4)).removed.empty());
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(7), /*may_remove=*/false).removed.empty());
  const auto r = l.reconcile({}, t0 + std::chrono::seconds(7));
  ASSERT_EQ(r.removed.size(), 1u);
  EXPECT_EQ(r.removed[0].tenant, "k8s-a");
  EXPECT_TRUE(l.used_units(0).empty());
}

TEST(Ledger, AnAllocationNoPodWasSeenHoldingGoesAfterTheGrace) {
  LedgerOptions o;
  o.unseen_grace = std::chrono::seconds(60);
  Ledger l = ledger_with(1, 16 * GiB, o);
  const auto t0 = Clock::now();
  l.allocate_memory(ids(0, {0}), t0, "k8s-a", "k");
  EXPECT_TRUE(l.reconcile({}, t0 + std::chrono::seconds(59)).removed.empty());
  EXPECT_EQ(l.reconcile({}, t0 + std::chrono::seconds(60)).removed.size(), 1u);
}

TEST(Ledger, InitAndAppContainersSharingIdsKeepBothTenantsAndTheExactHolderLabels) {
  Ledger l = ledger_with(1);
  const auto t = Clock::now();
  l.allocate_memory(ids(0, {0, 1, 2, 3}), t, "init", "k");
  l.allocate_memory(ids(0, {0, 1}), t, "app", "k");
  // PodResources lists the app container only (the init container finished).
  const auto r = l.reconcile({holding("p", "app", ids(0, {0, 1}))}, t);
  EXPECT_TRUE(r.removed.empty());
  EXPECT_EQ(l.allocations().at("app").workload.container_name, "app");
  EXPECT_EQ(l.used_units(0), (std::set<uint32_t>{0, 1, 2, 3}));
}

TEST(Ledger, MemoryHeldByAContainerNoTenantCoversStaysCounted) {
  Ledger l = ledger_with(1);
  const auto r = l.reconcile({holding("p", "c", ids(0, {3, 4}))}, Clock::now());
  EXPECT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(l.used_units(0), (std::set<uint32_t>{3, 4}));
  // Not again while it lasts.
  EXPECT_TRUE(l.reconcile({holding("p", "c", ids(0, {3, 4}))}, Clock::now()).warnings.empty());
}

TEST(Ledger, ComputeWithoutMemoryIsWarnedAboutOnce) {
  Ledger l = ledger_with(1);
  const auto first = l.reconcile({holding("p", "c", {}, 20)}, Clock::now());
  ASSERT_EQ(first.warnings.size(), 1u);
  EXPECT_NE(first.warnings[0].find("no cuslice.io/gpu-memory"), std::string::npos);
  EXPECT_TRUE(l.reconcile({holding("p", "c", {}, 20)}, Clock::now()).warnings.empty());
}

TEST(Ledger, UnitsStillHeldAboveAShrunkCapacityStayHealthyUntilGivenBack) {
  Ledger l = ledger_with(1);
  l.allocate_memory(ids(0, {14, 15}), Clock::now(), "a", "k");
  l.set_held_back(0, 4 * GiB);  // a ConfigMap tenant with a 4 GiB quota appeared
  const auto devices = l.memory_devices();
  EXPECT_EQ(devices.size(), 16u);
  EXPECT_EQ(healthy(devices), 14u);  // 0-11 free and usable, 14-15 held; 12-13 unhealthy
  EXPECT_FALSE(devices[12].healthy);
  EXPECT_TRUE(devices[15].healthy);
}

}  // namespace
}  // namespace cuslice::device_plugin
