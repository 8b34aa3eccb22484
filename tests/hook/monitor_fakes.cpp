// The fake driver and client of the launch monitor's unit tests (monitor_fakes.h).
#include "tests/hook/monitor_fakes.h"

#include "hook/base/fork_child.h"
#include "hook/link/client.h"

namespace monitor_test {

using cuslice::activity::g_state;

FakeDriver fake;
FakeClient client;

namespace {

CUevent event_of(int index) { return reinterpret_cast<CUevent>(static_cast<uintptr_t>(index)); }
int index_of(CUevent e) { return static_cast<int>(reinterpret_cast<uintptr_t>(e)); }

CUresult event_create(CUevent* e, unsigned int) {
  *e = event_of(++fake.events_made);
  fake.complete.push_back(false);
  return CUDA_SUCCESS;
}
CUresult event_record(CUevent, CUstream s) {
  if (fake.record_fails) return CUDA_ERROR_INVALID_HANDLE;
  fake.recorded_on.push_back(s);
  return CUDA_SUCCESS;
}
CUresult event_query(CUevent e) { return fake.complete.at(index_of(e) - 1) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
CUresult event_destroy(CUevent) {
  fake.events_destroyed++;
  return CUDA_SUCCESS;
}
CUresult ctx_set(CUcontext c) {
  fake.current = c;
  return CUDA_SUCCESS;
}
CUresult ctx_get(CUcontext* c) {
  *c = fake.current;
  return CUDA_SUCCESS;
}
CUresult is_capturing(CUstream, CUstreamCaptureStatus* st) {
  *st = fake.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult stream_op(bool wait, CUstream s, CUdeviceptr a, cuuint32_t v) {
  if (fake.stream_ops_fail) return CUDA_ERROR_NOT_SUPPORTED;
  fake.ops.push_back({wait, s, a, v});
  return CUDA_SUCCESS;
}
CUresult wait_value(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int) { return stream_op(true, s, a, v); }
CUresult write_value(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned int) { return stream_op(false, s, a, v); }

}  // namespace

void install_fake_driver() {
  auto& d = g_state.drv;
  d.event_create = &event_create;
  d.event_record = &event_record;
  d.event_query = &event_query;
  d.event_destroy = &event_destroy;
  d.ctx_set = &ctx_set;
  d.ctx_get = &ctx_get;
  d.is_capturing = &is_capturing;
  d.wait_value = &wait_value;
  d.write_value = &write_value;
}

void MonitorTest::SetUp() {
  cuslice::renew_in_child(g_state);
  fake = FakeDriver{};
  client = FakeClient{};
  cuslice::activity::t_last_key = 0;
  cuslice::activity::t_last_slot = nullptr;
  cuslice::activity::t_record = 0;
  cuslice::activity::t_record_tried = false;
  install_fake_driver();
  g_state.max_queued_ns = 500'000;
  g_state.higher_queued_ns = 250'000;
  g_state.park_cap_ns = 20'000'000;
  g_state.running.store(true);
}

void MonitorTest::TearDown() { g_state.gate_words = nullptr; }

void MonitorTest::set_up_gates() {
  g_state.gate_words = words_.data();
  g_state.gate_dptr = kGateDptr;
  g_state.gate_state.store(cuslice::activity::kGateReady);
  g_state.higher.store(true);
  g_state.others.store(true);
}

CUdeviceptr MonitorTest::word_address(const cuslice::activity::Slot& s, int which) {
  return kGateDptr + static_cast<CUdeviceptr>(which * cuslice::activity::kSlots + (&s - g_state.slots)) * 4;
}

}  // namespace monitor_test

// The client functions the monitor's files call.
namespace cuslice::client {
bool token_try(int) noexcept { return monitor_test::client.token; }
void report_gpu_time(int, uint64_t ns) noexcept {
  monitor_test::client.reported_ns += ns;
  monitor_test::client.reports++;
}
}  // namespace cuslice::client
