// The socket's decoder against every malformed message we could think of: wrong sizes,
// versions and magics, unterminated or forged names, absurd declared charges. Each must be
// refused with the right answer (or dropped), never accepted and never read out of bounds.
#include "scheduler/clients/message_decoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace cuslice {
namespace {

using Kind = FirstMessage::Kind;

template <typename T>
std::vector<unsigned char> bytes_of(const T& value, size_t n = sizeof(T)) {
  std::vector<unsigned char> out(std::max(n, sizeof(T)) + 1, 0);
  std::memcpy(out.data(), &value, sizeof(T));
  out.resize(n);
  return out;
}

FirstMessage decode(const std::vector<unsigned char>& b) { return decode_first_message(b.data(), b.size()); }

TEST(FirstMessage, AWellFormedRegistration) {
  wire::RegisterRequest req;
  std::strcpy(req.tenant, "inference");
  req.charged[3] = 4ull << 30;
  const FirstMessage m = decode(bytes_of(req));
  ASSERT_EQ(m.kind, Kind::kRegister) << m.why;
  EXPECT_STREQ(m.reg.tenant, "inference");
  EXPECT_EQ(m.reg.charged[3], 4ull << 30);
}

TEST(FirstMessage, ARegistrationWithoutATenantIsLeftToTheMatchRules) {
  EXPECT_EQ(decode(bytes_of(wire::RegisterRequest{})).kind, Kind::kRegister);
}

TEST(FirstMessage, ATenantNameThatCouldForgeALogLineIsRefused) {
  wire::RegisterRequest req;
  std::strcpy(req.tenant, "a\nINFO pid 1 joined tenant root");
  const FirstMessage m = decode(bytes_of(req));
  ASSERT_EQ(m.kind, Kind::kRefuseRegister);
  EXPECT_EQ(m.register_status, wire::RegisterStatus::kRefused);
  EXPECT_EQ(m.why.find('\n'), std::string::npos) << m.why;
  EXPECT_NE(m.why.find("a\\nINFO"), std::string::npos) << m.why;
}

TEST(FirstMessage, ATenantNameThatIsNotUtf8IsRefused) {
  wire::RegisterRequest req;
  std::strcpy(req.tenant, "\xff\xfe");
  const FirstMessage m = decode(bytes_of(req));
  ASSERT_EQ(m.kind, Kind::kRefuseRegister);
  EXPECT_EQ(m.why, "CUSLICE_TENANT `\\xff\\xfe` is not a tenant name (1 to 63 letters, digits, '-', '_' or '.', "
                   "and for a device plugin tenant ':' and its key)");
}

TEST(FirstMessage, ADevicePluginTenantIsJoinedByNameAndKey) {
  wire::RegisterRequest req;
  std::strcpy(req.tenant, "pod-a1:Zk3_9-abcdefghijkl");
  EXPECT_EQ(decode(bytes_of(req)).kind, Kind::kRegister);
  // The key is a credential: a refusal never quotes it.
  std::strcpy(req.tenant, "pod a1:secretsecretsecret");
  const FirstMessage m = decode(bytes_of(req));
  ASSERT_EQ(m.kind, Kind::kRefuseRegister);
  EXPECT_EQ(m.why.find("secret"), std::string::npos) << m.why;
  std::strcpy(req.tenant, "pod-a1:key with spaces");
  EXPECT_EQ(decode(bytes_of(req)).kind, Kind::kRefuseRegister);
}

TEST(FirstMessage, AnUnterminatedTenantNameIsABadRequest) {
  wire::RegisterRequest req;
  std::memset(req.tenant, 'a', sizeof req.tenant);
  const FirstMessage m = decode(bytes_of(req));
  ASSERT_EQ(m.kind, Kind::kRefuseRegister);
  EXPECT_EQ(m.register_status, wire::RegisterStatus::kBadRequest);
}

// 2^64-1 bytes "already charged" would wrap the tenant's usage when the process leaves.
TEST(FirstMessage, AnAbsurdDeclaredChargeIsABadRequest) {
  for (uint64_t charged : {UINT64_MAX, kMaxDeclaredChargeBytes + 1}) {
    wire::RegisterRequest req;
    req.charged[shm::kMaxGpus - 1] = charged;
    const FirstMessage m = decode(bytes_of(req));
    ASSERT_EQ(m.kind, Kind::kRefuseRegister) << charged;
    EXPECT_EQ(m.register_status, wire::RegisterStatus::kBadRequest);
  }
  wire::RegisterRequest req;
  req.charged[0] = kMaxDeclaredChargeBytes;
  EXPECT_EQ(decode(bytes_of(req)).kind, Kind::kRegister);
}

TEST(FirstMessage, ARegistrationOfAnotherVersionIsAnsweredSo) {
  wire::RegisterRequest req;
  req.version = wire::kVersion + 1;
  for (size_t n : {sizeof req, size_t{8}, sizeof req + 1}) {
    const FirstMessage m = decode(bytes_of(req, n));
    ASSERT_EQ(m.kind, Kind::kRefuseRegister) << n;
    EXPECT_EQ(m.register_status, wire::RegisterStatus::kVersionMismatch);
  }
}

TEST(FirstMessage, ARegistrationOfTheWrongSizeIsABadRequest) {
  wire::RegisterRequest req;
  for (size_t n : {size_t{8}, sizeof req - 1, sizeof req + 1}) {
    const FirstMessage m = decode(bytes_of(req, n));
    ASSERT_EQ(m.kind, Kind::kRefuseRegister) << n;
    EXPECT_EQ(m.register_status, wire::RegisterStatus::kBadRequest);
  }
  req.size = 12;  // the right length, a lying size field
  EXPECT_EQ(decode(bytes_of(req)).register_status, wire::RegisterStatus::kBadRequest);
}

TEST(FirstMessage, ControlRequests) {
  for (auto command : {wire::ControlCommand::kDescribe, wire::ControlCommand::kReload,
                       wire::ControlCommand::kEnsureTenant}) {
    wire::ControlRequest req;
    req.command = command;
    const FirstMessage m = decode(bytes_of(req));
    ASSERT_EQ(m.kind, Kind::kControl) << m.why;
    EXPECT_EQ(m.control.command, command);
  }
  wire::ControlRequest unknown;
  unknown.command = static_cast<wire::ControlCommand>(77);
  EXPECT_EQ(decode(bytes_of(unknown)).control_status, wire::ControlStatus::kBadRequest);

  wire::ControlRequest unterminated;
  unterminated.command = wire::ControlCommand::kEnsureTenant;
  std::memset(unterminated.tenant.name, 'x', sizeof unterminated.tenant.name);
  EXPECT_EQ(decode(bytes_of(unterminated)).control_status, wire::ControlStatus::kBadRequest);

  wire::ControlRequest other;
  other.version = wire::kControlVersion + 1;
  EXPECT_EQ(decode(bytes_of(other, 8)).control_status, wire::ControlStatus::kVersionMismatch);
  EXPECT_EQ(decode(bytes_of(wire::ControlRequest{}, sizeof(wire::ControlRequest) + 1)).control_status,
            wire::ControlStatus::kVersionMismatch);
}

TEST(FirstMessage, PluginRequests) {
  for (auto command : {wire::PluginCommand::kApply, wire::PluginCommand::kRemove, wire::PluginCommand::kList}) {
    wire::PluginRequest req;
    req.command = command;
    std::strcpy(req.tenant.name, "pod-a1");
    const FirstMessage m = decode(bytes_of(req));
    ASSERT_EQ(m.kind, Kind::kPlugin) << m.why;
    EXPECT_STREQ(m.plugin.tenant.name, "pod-a1");
  }
  wire::PluginRequest unknown;
  unknown.command = static_cast<wire::PluginCommand>(9);
  EXPECT_EQ(decode(bytes_of(unknown)).control_status, wire::ControlStatus::kBadRequest);
  wire::PluginRequest unterminated;
  std::memset(unterminated.tenant.pod_name, 'p', sizeof unterminated.tenant.pod_name);
  EXPECT_EQ(decode(bytes_of(unterminated)).control_status, wire::ControlStatus::kBadRequest);
  wire::PluginRequest other;
  other.version = wire::kPluginVersion + 1;
  EXPECT_EQ(decode(bytes_of(other, 8)).control_status, wire::ControlStatus::kVersionMismatch);
  wire::ControlRequest workloads;
  workloads.command = wire::ControlCommand::kWorkloads;
  EXPECT_EQ(decode(bytes_of(workloads)).kind, Kind::kControl);
}

TEST(FirstMessage, WhatIsNotThisProtocolIsDropped) {
  EXPECT_EQ(decode({}).kind, Kind::kDrop);
  EXPECT_EQ(decode({'C', 'L'}).kind, Kind::kDrop);
  EXPECT_EQ(decode(std::vector<unsigned char>(7, 0x43)).kind, Kind::kDrop);  // shorter than a header
  EXPECT_EQ(decode(std::vector<unsigned char>(sizeof(wire::RegisterRequest), 0)).kind, Kind::kDrop);
  EXPECT_EQ(decode(std::vector<unsigned char>{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'}).kind, Kind::kDrop);
}

TEST(HookMessage, KicksAreShort) {
  const unsigned char kick = 1;
  EXPECT_EQ(decode_hook_message(&kick, 1).kind, HookMessage::Kind::kKick);
  const std::vector<unsigned char> longer(kMaxKickBytes + 1, 0);
  EXPECT_EQ(decode_hook_message(longer.data(), longer.size()).kind, HookMessage::Kind::kDrop);
  const std::vector<unsigned char> oversized(sizeof(wire::WorkloadMessage) + 1, 0);
  EXPECT_EQ(decode_hook_message(oversized.data(), oversized.size()).kind, HookMessage::Kind::kDrop);
}

TEST(HookMessage, ABlockerClaimKeepsOnlyTheKnownBits) {
  wire::BlockerClaim claim;
  claim.flags = shm::kUsesManaged | (1u << 30);
  const HookMessage m = decode_hook_message(&claim, sizeof claim);
  EXPECT_EQ(m.kind, HookMessage::Kind::kClaim);
  EXPECT_EQ(m.claim, shm::kUsesManaged);
  claim.magic = 0;  // eight bytes of anything else: a kick
  EXPECT_EQ(decode_hook_message(&claim, sizeof claim).kind, HookMessage::Kind::kKick);
}

TEST(HookMessage, AMemoryRequest) {
  wire::MemoryRequest r;
  r.gpu = 3;
  r.sequence = 7;
  r.bytes = 1 << 30;
  HookMessage m = decode_hook_message(&r, sizeof r);
  ASSERT_EQ(m.kind, HookMessage::Kind::kMemory) << m.why;
  EXPECT_EQ(m.memory.gpu, 3u);
  EXPECT_EQ(m.memory.sequence, 7u);
  r.version = wire::kVersion + 1;  // another version's: read as a kick
  EXPECT_EQ(decode_hook_message(&r, sizeof r).kind, HookMessage::Kind::kKick);
  r.magic = 0;
  EXPECT_EQ(decode_hook_message(&r, sizeof r).kind, HookMessage::Kind::kDrop);
}

TEST(HookMessage, AWorkload) {
  wire::WorkloadMessage w;
  std::strcpy(w.pod_namespace, "team-a");
  std::strcpy(w.pod_name, "trainer-7d9f.abc");
  const HookMessage m = decode_hook_message(&w, sizeof w);
  ASSERT_EQ(m.kind, HookMessage::Kind::kWorkload) << m.why;
  EXPECT_EQ(m.pod_namespace, "team-a");
  EXPECT_EQ(m.pod_name, "trainer-7d9f.abc");
  EXPECT_EQ(m.container_name, "");
}

TEST(HookMessage, AWorkloadWithNamesThatAreNotKubernetesNamesIsDropped) {
  for (const char* bad : {"Team", "a b", "a\"b", "a\nb", "x\xff"}) {
    wire::WorkloadMessage w;
    std::strcpy(w.container_name, bad);
    EXPECT_EQ(decode_hook_message(&w, sizeof w).kind, HookMessage::Kind::kDrop) << bad;
  }
  wire::WorkloadMessage unterminated;
  std::memset(unterminated.pod_namespace, 'a', sizeof unterminated.pod_namespace);
  EXPECT_EQ(decode_hook_message(&unterminated, sizeof unterminated).kind, HookMessage::Kind::kDrop);
  wire::WorkloadMessage too_long;
  std::memset(too_long.pod_name, 'a', 254);
  EXPECT_EQ(decode_hook_message(&too_long, sizeof too_long).kind, HookMessage::Kind::kDrop);
}

}  // namespace
}  // namespace cuslice
