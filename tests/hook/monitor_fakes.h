// What the launch monitor's unit tests put in place of the driver and the scheduler client:
// the driver functions it calls through g_state.drv, answered from a table of fake events and
// a log of stream memory operations, and the client functions its files call (defined in
// monitor_fakes.cpp). A test starts from a fresh g_state (MonitorTest).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "hook/base/cuda_api.h"
#include "hook/monitor/monitor_state.h"

namespace monitor_test {

// A stream memory operation the monitor's code asked the fake driver for.
struct StreamOp {
  bool wait;  // cuStreamWaitValue32 (else cuStreamWriteValue32)
  CUstream stream;
  CUdeviceptr address;
  uint32_t value;
};

struct FakeDriver {
  CUcontext current = reinterpret_cast<CUcontext>(0xC0);
  int events_made = 0;
  int events_destroyed = 0;
  std::vector<bool> complete;  // by event index - 1: cuEventQuery says done
  bool record_fails = false;
  bool capturing = false;
  bool stream_ops_fail = false;
  std::vector<StreamOp> ops;
  std::vector<CUstream> recorded_on;
};
extern FakeDriver fake;

// The client's answers.
struct FakeClient {
  bool token = true;             // token_try
  uint64_t reported_ns = 0;      // report_gpu_time, summed
  int reports = 0;
};
extern FakeClient client;

// The fake driver's functions in g_state.drv (monitor_fakes.cpp).
void install_fake_driver();

// Each test starts from a fresh state, the fake driver installed and the bounds set, as
// start() would set them: CUSLICE_MAX_QUEUED 500 us, CUSLICE_PREEMPT_QUEUED 250 us,
// CUSLICE_PARK_QUEUED 20 ms. The gate words are a buffer of the test's, "registered" at
// kGateDptr.
constexpr CUdeviceptr kGateDptr = 0x100000;
class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Parking as below a higher-priority tenant, with the gate words set up.
  void set_up_gates();
  // The GPU address of a slot's word: 0 gate, 1 reached, 2 mark.
  static CUdeviceptr word_address(const cuslice::activity::Slot& s, int which);

  std::vector<std::atomic<uint32_t>> words_ = std::vector<std::atomic<uint32_t>>(3 * cuslice::activity::kSlots);
};

}  // namespace monitor_test
