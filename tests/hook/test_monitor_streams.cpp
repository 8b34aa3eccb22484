// The launch monitor's streams and gates, without a driver (monitor_fakes.h answers for it):
// the stream slots and the event records on them (stream_slots), what parking decides for a
// launch and which gates the monitor opens (parking), and the launching threads' records
// (thread_launches).
#include <cstdint>
#include <vector>

#include "hook/monitor/gate_words.h"
#include "hook/monitor/parking.h"
#include "hook/monitor/stream_slots.h"
#include "hook/monitor/thread_launches.h"
#include "tests/hook/monitor_fakes.h"

namespace {

using namespace cuslice::activity;
using monitor_test::fake;
using monitor_test::MonitorTest;
using monitor_test::StreamOp;

using StreamSlots = MonitorTest;
using Parking = MonitorTest;
using ThreadLaunches = MonitorTest;

const CUstream kStream = reinterpret_cast<CUstream>(0x5000);
const CUstream kOther = reinterpret_cast<CUstream>(0x6000);

TEST_F(StreamSlots, AStreamGetsOneSlotAndAbsentOnesAreNotAdded) {
  Slot* a = find_or_add(0x5000, true);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->key.load(), 0x5000u);
  EXPECT_EQ(find_or_add(0x5000, true), a);
  EXPECT_EQ(find_or_add(0x5000, false), a);
  EXPECT_EQ(find_or_add(0x7000, false), nullptr);
  EXPECT_NE(find_or_add(0x7000, true), a);
}

TEST_F(StreamSlots, AFullTableTracksNoMoreStreams) {
  for (uintptr_t i = 1; i <= kSlots; ++i) ASSERT_NE(find_or_add(i << 4, true), nullptr) << i;
  EXPECT_EQ(find_or_add((kSlots + 1) << 4, true), nullptr);
  EXPECT_NE(find_or_add(16, false), nullptr);
}

TEST_F(StreamSlots, TheFirstLaunchGivesTheSlotItsContextAndDevice) {
  Slot* s = slot_of(3, kStream);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->key.load(), 0x5000u);
  EXPECT_EQ(s->device.load(std::memory_order_relaxed), 3);
  EXPECT_EQ(s->ctx, fake.current);
  EXPECT_EQ(slot_of(3, kStream), s);  // remembered for the thread's next launch
  EXPECT_EQ(t_last_slot, s);
}

TEST_F(StreamSlots, ADefaultStreamIsItsContexts) {
  Slot* legacy = slot_of(0, nullptr);
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(legacy->key.load(), reinterpret_cast<uintptr_t>(fake.current) | 1);
  EXPECT_EQ(slot_of(0, CU_STREAM_LEGACY), legacy);
  EXPECT_EQ(slot_of(0, CU_STREAM_PER_THREAD), legacy);
  EXPECT_EQ(t_last_slot, nullptr);  // not remembered: the context may change between launches
  fake.current = reinterpret_cast<CUcontext>(0xD0);
  EXPECT_NE(slot_of(0, nullptr), legacy);
}

TEST_F(StreamSlots, AMarkMakesTheStreamDirtyAndAddsTheEstimate) {
  mark(0, kStream, 0);
  Slot* s = slot_of(0, kStream);
  EXPECT_EQ(s->dirty.load(), 1u);
  EXPECT_EQ(s->enq_ns.load(), 0);
  mark(0, kStream, 700);
  mark(0, kStream, 300);
  EXPECT_EQ(s->enq_ns.load(), 1'000);
}

TEST_F(StreamSlots, ARecordCoversWhatWasLaunchedBeforeIt) {
  Slot& s = *slot_of(0, kStream);
  g_state.devices[0].launched.store(3);
  s.enq_ns.store(300);
  s.gates.store(2);
  ASSERT_TRUE(record(s, 0x5000));
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.launches_at[0], 3u);
  EXPECT_EQ(s.rec_enq[0], 300);
  EXPECT_EQ(s.rec_gates[0], 2u);
  ASSERT_EQ(fake.recorded_on.size(), 1u);
  EXPECT_EQ(fake.recorded_on[0], kStream);
  EXPECT_EQ(g_state.counts.records, 1u);
}

TEST_F(StreamSlots, ADefaultStreamIsRecordedAsTheLegacyStream) {
  Slot& s = *slot_of(0, nullptr);
  ASSERT_TRUE(record(s, s.key.load()));
  ASSERT_EQ(fake.recorded_on.size(), 1u);
  EXPECT_EQ(fake.recorded_on[0], CU_STREAM_LEGACY);
}

TEST_F(StreamSlots, NothingIsRecordedOnACapturingOrVanishedStream) {
  Slot& s = *slot_of(0, kStream);
  fake.capturing = true;
  EXPECT_TRUE(record(s, 0x5000));  // nothing to wait for there
  EXPECT_EQ(s.count, 0);
  fake.capturing = false;
  fake.record_fails = true;
  EXPECT_TRUE(record(s, 0x5000));
  EXPECT_EQ(s.count, 0);
}

TEST_F(StreamSlots, AFullRingOfRecordsRecordsNoMore) {
  Slot& s = *slot_of(0, kStream);
  for (int i = 0; i < kEventsPerSlot; ++i) ASSERT_TRUE(record(s, 0x5000)) << i;
  EXPECT_FALSE(record(s, 0x5000));
  EXPECT_EQ(s.count, kEventsPerSlot);
}

TEST_F(StreamSlots, RetiringStopsAtTheFirstRecordNotComplete) {
  Slot& s = *slot_of(0, kStream);
  Device& dev = g_state.devices[0];
  for (int i = 1; i <= 3; ++i) {
    dev.launched.store(10 * i);
    s.enq_ns.store(100 * i);
    ASSERT_TRUE(record(s, 0x5000));
  }
  EXPECT_TRUE(retire(s));
  EXPECT_EQ(dev.completed.load(), 0u);
  fake.complete[0] = true;
  fake.complete[2] = true;  // done, but behind one that is not
  EXPECT_TRUE(retire(s));
  EXPECT_EQ(dev.completed.load(), 10u);
  EXPECT_EQ(s.done_ns, 100);
  EXPECT_EQ(s.count, 2);
  fake.complete[1] = true;
  EXPECT_FALSE(retire(s));
  EXPECT_EQ(dev.completed.load(), 30u);
  EXPECT_EQ(s.done_ns, 300);
  EXPECT_EQ(s.count, 0);
}

TEST_F(StreamSlots, TheCompletedCountOnlyGrows) {
  raise_completed(1, 5);
  raise_completed(1, 3);
  EXPECT_EQ(g_state.devices[1].completed.load(), 5u);
  raise_completed(1, 9);
  EXPECT_EQ(g_state.devices[1].completed.load(), 9u);
}

TEST_F(StreamSlots, AReleasedSlotLetsItsWorkRunAndForgetsTheStream) {
  set_up_gates();
  Slot& s = *slot_of(0, kStream);
  ASSERT_TRUE(record(s, 0x5000));
  ASSERT_TRUE(record(s, 0x5000));
  s.gates.store(4);
  s.marks.store(6);
  s.enq_ns.store(1'000);
  release_slot(s);
  EXPECT_EQ(gate_word(s).load(), 4u);  // held back work runs; the gate count stays
  EXPECT_EQ(s.gates.load(), 4u);
  EXPECT_EQ(s.marks_seen, 6u);
  EXPECT_EQ(s.enq_ns.load(), 0);
  EXPECT_EQ(fake.events_destroyed, 2);
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.key.load(), 0u);
  EXPECT_EQ(s.device.load(std::memory_order_relaxed), -1);
  EXPECT_EQ(find_or_add(0x5000, false), nullptr);
  EXPECT_NE(slot_of(0, kStream), nullptr);  // the thread's remembered slot is checked
}

// Launches on a parking stream, each after `est` more estimated work was launched there.
bool park_after(Slot& s, int64_t est) {
  s.enq_ns.fetch_add(est);
  return park_on_stream(0, 0, kStream);
}

TEST_F(Parking, WithTheTokenAndRoomALaunchGoesAndIsMarkedEverySegment) {
  set_up_gates();  // below a higher tenant: segments of half of 250 us
  Slot& s = *slot_of(0, kStream);
  EXPECT_TRUE(park_after(s, 0));
  EXPECT_TRUE(fake.ops.empty());
  EXPECT_TRUE(park_after(s, 124'999));
  EXPECT_TRUE(fake.ops.empty());
  EXPECT_TRUE(park_after(s, 1));  // a segment since the last mark: the GPU writes mark 1
  ASSERT_EQ(fake.ops.size(), 1u);
  EXPECT_FALSE(fake.ops[0].wait);
  EXPECT_EQ(fake.ops[0].address, word_address(s, 2));
  EXPECT_EQ(fake.ops[0].value, 1u);
  EXPECT_EQ(s.marks.load(), 1u);
  EXPECT_EQ(s.mark_enq, 125'000);
  EXPECT_EQ(s.mark_ring[1].enq.load(), 125'000);
  EXPECT_EQ(s.gates.load(), 0u);
  EXPECT_EQ(g_state.counts.held.load(), 0u);
}

TEST_F(Parking, WithoutTheTokenALaunchIsHeldBackBehindAGate) {
  set_up_gates();
  monitor_test::client.token = false;
  Slot& s = *slot_of(0, kStream);
  g_state.devices[0].launched.store(7);
  EXPECT_TRUE(park_after(s, 40'000));
  ASSERT_EQ(fake.ops.size(), 2u);
  // The GPU says it reached gate 1, then waits until the gate word reaches 1.
  EXPECT_FALSE(fake.ops[0].wait);
  EXPECT_EQ(fake.ops[0].address, word_address(s, 1));
  EXPECT_TRUE(fake.ops[1].wait);
  EXPECT_EQ(fake.ops[1].address, word_address(s, 0));
  EXPECT_EQ(fake.ops[1].value, 1u);
  EXPECT_EQ(s.gates.load(), 1u);
  EXPECT_EQ(s.gate_at[1].load(), 40'000);
  EXPECT_EQ(s.gate_launched[1].load(), 7u);
  EXPECT_EQ(g_state.counts.held.load(), 1u);
  EXPECT_EQ(s.inserting.load(), 0u);
}

TEST_F(Parking, HeldBackWorkGetsAGateAgainOnlyEverySegment) {
  set_up_gates();
  monitor_test::client.token = false;
  Slot& s = *slot_of(0, kStream);
  ASSERT_TRUE(park_after(s, 0));  // gate 1 at 0
  EXPECT_TRUE(park_after(s, 124'999));
  EXPECT_EQ(s.gates.load(), 1u);  // behind the closed gate already there
  EXPECT_EQ(fake.ops.size(), 2u);
  EXPECT_TRUE(park_after(s, 1));
  EXPECT_EQ(s.gates.load(), 2u);  // its segment is full: a new gate
  EXPECT_EQ(s.gate_at[2].load(), 125'000);
  // A launch with the token is held back too while a gate before it is closed: it must not
  // overtake the work held back.
  monitor_test::client.token = true;
  EXPECT_TRUE(park_after(s, 0));
  EXPECT_EQ(g_state.counts.held.load(), 4u);
}

TEST_F(Parking, WithTheTokenButNoRoomALaunchIsHeldBackToo) {
  set_up_gates();
  Slot& s = *slot_of(0, kStream);
  Device& dev = g_state.devices[0];
  dev.mean_ns.store(1'000);
  dev.launched.store(10);
  dev.added_ns.store(250'000);  // the bound below a higher tenant
  EXPECT_TRUE(park_after(s, 0));
  EXPECT_EQ(s.gates.load(), 1u);
}

TEST_F(Parking, ALaunchThatCannotBeHeldBackOnTheGpuWaitsOnTheCpu) {
  set_up_gates();
  monitor_test::client.token = false;
  fake.stream_ops_fail = true;
  Slot& s = *slot_of(0, kStream);
  EXPECT_FALSE(park_after(s, 0));
  EXPECT_EQ(s.gates.load(), 0u);
  // Behind a closed gate it is held back whether or not a new gate could be put.
  s.gates.store(1);
  EXPECT_TRUE(park_after(s, 200'000));
  EXPECT_EQ(s.gates.load(), 1u);
}

TEST_F(Parking, NoGateIsPutUntilTheWordsAreSetUp) {
  g_state.gate_state.store(kGateUnavailable);
  EXPECT_FALSE(park_on_stream(0, 0, kStream));
  EXPECT_FALSE(parking());
  set_up_gates();
  EXPECT_TRUE(parking());
  g_state.park_cap_ns = 0;  // CUSLICE_PARK_QUEUED=0
  EXPECT_FALSE(parking());
}

TEST_F(Parking, ANewGateNeedsAFullSegmentAndRoomInTheStreamsMemory) {
  EXPECT_FALSE(wants_new_gate(999, 0, 1, 0, 1'000));
  EXPECT_TRUE(wants_new_gate(1'000, 0, 1, 0, 1'000));
  EXPECT_TRUE(wants_new_gate(5'000, 3'000, kGates - 1, 1, 1'000));
  EXPECT_FALSE(wants_new_gate(5'000, 3'000, kGates, 1, 1'000));  // the last segment grows instead
  EXPECT_TRUE(wants_new_gate(5'000, 3'000, 2, UINT32_MAX - 1, 1'000));  // compared cyclically
}

// A stream held back behind gates 1.. at `at` (estimated time launched before each), with
// `enq` launched in all.
Slot& held_back(uintptr_t key, int device, const std::vector<int64_t>& at, int64_t enq) {
  Slot& s = *find_or_add(key, true);
  s.device.store(device, std::memory_order_relaxed);
  for (size_t k = 1; k <= at.size(); ++k) s.gate_at[k % kGates].store(at[k - 1]);
  s.gates.store(static_cast<uint32_t>(at.size()));
  s.enq_ns.store(enq);
  return s;
}

TEST_F(Parking, TheMonitorOpensGatesAsFarAsTheBoundAllows) {
  set_up_gates();
  g_state.higher.store(false);  // two segments ahead at least
  g_state.higher_queued_ns = 250'000;
  g_state.max_queued_ns = 250'000;
  Slot& s = held_back(0x5000, 0, {0, 100'000, 200'000, 300'000}, 400'000);
  Look look;
  EXPECT_TRUE(open_gates(0, look, false));
  EXPECT_EQ(gate_word(s).load(), 2u);  // a third segment would make 300 us
  EXPECT_EQ(look.runnable, 200'000);
  EXPECT_TRUE(look.parked);
  // Nothing seen done since: no more room.
  look = Look{};
  look.runnable = 200'000;
  EXPECT_FALSE(open_gates(0, look, false));
  EXPECT_EQ(gate_word(s).load(), 2u);
  // The GPU went past gate 2: what it ran makes room, and the rest is let run.
  s.done_ns = 150'000;
  look = Look{};
  look.runnable = 50'000;
  EXPECT_TRUE(open_gates(0, look, false));
  EXPECT_EQ(gate_word(s).load(), 4u);
  EXPECT_FALSE(look.parked);
}

TEST_F(Parking, SegmentsAheadAreLetRunWhateverTheBound) {
  set_up_gates();
  g_state.higher.store(false);
  g_state.max_queued_ns = 50'000;  // less than one segment
  Slot& s = held_back(0x5000, 0, {0, 100'000, 200'000, 300'000}, 400'000);
  Look look;
  EXPECT_TRUE(open_gates(0, look, false));
  EXPECT_EQ(gate_word(s).load(), 2u);  // two ahead, so the GPU never waits for a pass
  // Below a higher tenant, one.
  g_state.higher.store(true);
  g_state.higher_queued_ns = 50'000;
  gate_word(s).store(0);
  look = Look{};
  EXPECT_TRUE(open_gates(0, look, false));
  EXPECT_EQ(gate_word(s).load(), 1u);
}

TEST_F(Parking, AStreamTheGpuCaughtUpWithGetsItsNextSegmentEvenOverTheBound) {
  set_up_gates();
  g_state.higher.store(false);
  g_state.max_queued_ns = 250'000;
  Slot& s = held_back(0x5000, 0, {0, 100'000, 200'000, 300'000}, 400'000);
  gate_word(s).store(2);
  // Other streams fill the bound. Two segments let run and not seen done: that is enough.
  Look look;
  look.runnable = 300'000;
  EXPECT_FALSE(open_gates(0, look, false));
  // The GPU went past gate 2: one segment ahead, the next is let run, but no more.
  s.done_ns = 150'000;
  EXPECT_TRUE(open_gates(0, look, false));
  EXPECT_EQ(gate_word(s).load(), 3u);
  EXPECT_TRUE(look.parked);
}

TEST_F(Parking, OpeningEverythingOpensOnlyTheDevicesStreams) {
  set_up_gates();
  Slot& mine = held_back(0x5000, 0, {0, 10}, 20);
  Slot& other = held_back(0x6000, 1, {0, 10}, 20);
  Look look;
  EXPECT_TRUE(open_gates(0, look, true));
  EXPECT_EQ(gate_word(mine).load(), 2u);
  EXPECT_EQ(gate_word(other).load(), 0u);
  EXPECT_FALSE(open_gates(0, look, true));  // nothing was closed
  retire_gates();  // the context the words are registered in goes: everything runs
  EXPECT_EQ(gate_word(other).load(), 2u);
  EXPECT_EQ(g_state.gate_state.load(), kGateUnset);
}

TEST_F(ThreadLaunches, AThreadCountsInItsOwnRecordAndTheMonitorFoldsThem) {
  const int r = claim_record();
  ASSERT_EQ(r, 1);
  EXPECT_EQ(claim_record(), r);
  LaunchRecord& rec = g_state.records[r - 1];
  for (int i = 0; i < 3; ++i) count_begun(rec, 2);
  count_done(rec, 2);
  Device& dev = g_state.devices[2];
  fold_begun(2);
  EXPECT_EQ(dev.tickets.load(), 3u);
  EXPECT_EQ(dev.launched.load(), 0u);
  EXPECT_EQ(unfolded_done(2), 1u);
  fold(2);
  EXPECT_EQ(dev.tickets.load(), 3u);  // folded once only
  EXPECT_EQ(dev.launched.load(), 1u);
  EXPECT_EQ(unfolded_done(2), 0u);
  count_done(rec, 2);
  count_done(rec, 2);
  fold(2);
  EXPECT_EQ(dev.launched.load(), 3u);
  EXPECT_EQ(dev.tickets.load(), dev.launched.load());
}

TEST_F(ThreadLaunches, ARecordIsClaimedOncePerThread) {
  for (int i = 0; i < kLaunchRecords; ++i) g_state.records[i].owner.store(1);
  EXPECT_EQ(claim_record(), 0);
  g_state.records[5].owner.store(0);
  EXPECT_EQ(claim_record(), 0);  // tried once: counts on the device from then on
}

}  // namespace
