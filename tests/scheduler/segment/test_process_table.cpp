// ProcessTable: the daemon's record of registered processes, by slot.
#include <gtest/gtest.h>

#include <algorithm>

#include "scheduler/segment/process_table.h"

namespace cuslice {
namespace {

ProcessRecord record(uint32_t slot, uint32_t tenant, pid_t pid) { return {slot, tenant, pid, 1000, 42, {}}; }

bool holds(const ProcessTable& table, pid_t pid) {
  return std::any_of(table.all().begin(), table.all().end(), [&](const ProcessRecord& p) { return p.pid == pid; });
}

TEST(ProcessTable, FindsEachProcessBySlotAndCountsThemByTenant) {
  ProcessTable table;
  table.add(record(3, 1, 100));
  table.add(record(7, 1, 101));
  table.add(record(9, 2, 102));
  ASSERT_EQ(table.all().size(), 3u);
  ASSERT_NE(table.at(7), nullptr);
  EXPECT_EQ(table.at(7)->pid, 101);
  EXPECT_EQ(table.at(4), nullptr);
  EXPECT_EQ(table.in_tenant(1), 2);
  EXPECT_EQ(table.in_tenant(2), 1);
  EXPECT_EQ(table.in_tenant(0), 0);
}

TEST(ProcessTable, RemovingAProcessKeepsEveryOtherOneFoundBySlot) {
  ProcessTable table;
  for (uint32_t s = 0; s < 5; ++s) table.add(record(s, s % 2, static_cast<pid_t>(200 + s)));
  table.remove(1);  // from the middle: the last record moves into its place
  table.remove(4);  // the last one
  table.remove(1);  // again: nothing
  EXPECT_EQ(table.all().size(), 3u);
  EXPECT_FALSE(holds(table, 201));
  EXPECT_FALSE(holds(table, 204));
  for (uint32_t s : {0u, 2u, 3u}) {
    ASSERT_NE(table.at(s), nullptr) << "slot " << s;
    EXPECT_EQ(table.at(s)->pid, static_cast<pid_t>(200 + s));
  }
  EXPECT_EQ(table.in_tenant(0), 2);
  EXPECT_EQ(table.in_tenant(1), 1);
}

TEST(ProcessTable, RefusesASlotTakenOrOutOfRange) {
  ProcessTable table;
  table.add(record(5, 0, 300));
  table.add(record(5, 1, 301));  // taken: the first stays
  table.add(record(shm::kMaxProcesses, 0, 302));
  table.add(record(6, shm::kMaxTenants, 303));
  ASSERT_EQ(table.all().size(), 1u);
  EXPECT_EQ(table.at(5)->pid, 300);
  EXPECT_EQ(table.in_tenant(1), 0);
  EXPECT_EQ(table.in_tenant(shm::kMaxTenants), 0);
}

TEST(ProcessTable, KeepsTheWorkloadAProcessReportedUntilItLeaves) {
  ProcessTable table;
  table.add(record(2, 0, 400));
  table.set_workload(2, {"ns", "pod", "ctr"});
  table.set_workload(3, {"x", "y", "z"});  // nobody there: ignored
  EXPECT_EQ(table.at(2)->workload.pod_name, "pod");
  table.remove(2);
  table.add(record(2, 0, 401));
  EXPECT_TRUE(table.at(2)->workload.pod_name.empty());
}

}  // namespace
}  // namespace cuslice
