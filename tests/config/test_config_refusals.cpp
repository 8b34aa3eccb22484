// What the configuration loader refuses, and how it says so: the file is read by a daemon
// that every tenant talks to, so anything odd is an error at its line and column, never a
// silent default, and a message quotes only a short, escaped excerpt of the input. One table
// row per refusal; files on disk, because the limits on the file itself are part of it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/tenant_config.h"

namespace cuslice {
namespace {

class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/cuslice-refusals-XXXXXX";
    path_ = mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// "line:column: message" for every error, the file name checked and stripped.
std::vector<std::string> errors_of(const ConfigResult& r, const std::string& file) {
  std::vector<std::string> out;
  for (const ConfigError& e : r.errors) {
    EXPECT_EQ(e.file, file);
    out.push_back(std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.message);
  }
  return out;
}

struct Refusal {
  const char* name;
  const char* yaml;
  const char* error;  // the only error, "line:column: message"; a trailing '*' matches any rest
};

std::ostream& operator<<(std::ostream& os, const Refusal& r) { return os << r.name; }

class Refused : public ::testing::TestWithParam<Refusal> {};

TEST_P(Refused, WithOneErrorAtItsPlace) {
  const Refusal& row = GetParam();
  TempDir dir;
  const std::string file = dir.write("cuslice.yaml", row.yaml);
  const ConfigResult r = load_config_file(file);
  const std::vector<std::string> errors = errors_of(r, file);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  std::string want = row.error;
  if (!want.empty() && want.back() == '*') {
    want.pop_back();
    EXPECT_EQ(errors[0].substr(0, want.size()), want);
  } else {
    EXPECT_EQ(errors[0], want);
  }
  // Whatever the input, a message is one line: it cannot forge another line of a log.
  EXPECT_EQ(errors[0].find_first_of("\n\r"), std::string::npos) << errors[0];
}

constexpr Refusal kRefusals[] = {
    // A percentage finer than the segment's millionths would round to 0, which means "none".
    {"TinyMemoryPercentage", "tenants:\n  - name: a\n    memory: 0.00001%\n",
     "3:13: `memory` `0.00001%` is below 0.0001%, the finest percentage the scheduler holds: write a size in "
     "bytes for a smaller quota"},
    {"TinyShare", "tenants:\n  - name: a\n    compute: {share: 0.00005%}\n",
     "3:22: `share` `0.00005%` is below 0.0001%, the finest percentage the scheduler holds"},
    {"TinyLimit", "tenants:\n  - name: a\n    compute: {limit: 0.00009%}\n",
     "3:22: `limit` `0.00009%` is below 0.0001%, the finest percentage the scheduler holds"},
    // Explicit shares past 100%, and explicit shares that leave a tenant without one < 1%.
    {"SharesPastOneHundred", "tenants:\n  - name: a\n    compute: {share: 70%}\n  - name: b\n    compute: {share: 31%}\n",
     "5:22: the tenants' shares add up to 101%, more than 100%"},
    {"NothingLeftForATenantWithoutAShare",
     "tenants:\n  - name: a\n    compute: {share: 100%}\n  - name: b\n",
     "4:11: tenant `b` has no `compute.share`, and the explicit shares (100%) leave less than 1% to each tenant "
     "without one: give it a share, or lower the others'"},
    {"TooLittleLeftForThreeTenantsWithoutAShare",
     "tenants:\n  - name: a\n    compute: {share: 98%}\n  - name: b\n  - name: c\n  - name: d\n",
     "4:11: tenant `b` has no `compute.share`, and the explicit shares (98%) leave less than 1% to each tenant "
     "without one: give it a share, or lower the others'"},
    // Duplicate keys: yaml-cpp keeps both and its lookup returns the first.
    {"DuplicateTenantKey", "tenants:\n  - name: a\n    memory: 1GiB\n    memory: 100GiB\n",
     "4:5: duplicate key `memory` (first given at line 3, column 5)"},
    {"DuplicateTopLevelKey", "tenants:\n  - name: a\ntenants:\n  - name: b\n",
     "3:1: duplicate key `tenants` (first given at line 1, column 1)"},
    {"DuplicateSchedulerKey", "scheduler:\n  quantum: 10ms\n  quantum: 20ms\ntenants:\n  - name: a\n",
     "3:3: duplicate key `quantum` (first given at line 2, column 3)"},
    {"DuplicateKeyInAFlowMapping", "tenants:\n  - name: a\n    compute: {share: 10%, share: 90%}\n",
     "3:27: duplicate key `share` (first given at line 3, column 15)"},
    {"DuplicateMatchKey", "tenants:\n  - name: a\n    match: {uid: 1000, uid: 0}\n",
     "3:24: duplicate key `uid` (first given at line 3, column 13)"},
    {"DuplicateName", "tenants:\n  - name: a\n    name: b\n", "3:5: duplicate key `name` (first given at line 2, column 5)"},
    {"KeyThatIsAList", "tenants:\n  - name: a\n    ? [memory]\n    : 1GiB\n",
     "3:7: a key must be a plain word, not a list or a mapping"},
    {"DuplicateTenantName", "tenants:\n  - name: a\n  - name: a\n", "3:11: duplicate tenant name `a`"},
    // Durations that would pin a CPU or starve the others.
    {"QuantumOfOneNanosecond", "scheduler: {quantum: 1ns}\ntenants:\n  - name: a\n",
     "1:22: `quantum` `1ns` is out of range: from 1ms to 10s"},
    {"QuantumJustBelowTheMinimum", "scheduler: {quantum: 999us}\ntenants:\n  - name: a\n",
     "1:22: `quantum` `999us` is out of range: from 1ms to 10s"},
    {"QuantumOfAMinute", "scheduler: {quantum: 60s}\ntenants:\n  - name: a\n",
     "1:22: `quantum` `60s` is out of range: from 1ms to 10s"},
    {"LimitWindowTooShort", "scheduler: {limit_window: 1ms}\ntenants:\n  - name: a\n",
     "1:27: `limit_window` `1ms` is out of range: from 10ms to 60s"},
    {"LimitWindowTooLong", "scheduler: {limit_window: 61s}\ntenants:\n  - name: a\n",
     "1:27: `limit_window` `61s` is out of range: from 10ms to 60s"},
    {"LowerTimesliceTooShort", "scheduler: {lower_priority_timeslice: 49us}\ntenants:\n  - name: a\n",
     "1:39: `lower_priority_timeslice` `49us` is out of range: from 50us to 2ms"},
    {"LowerTimesliceTooLong", "scheduler: {lower_priority_timeslice: 3ms}\ntenants:\n  - name: a\n",
     "1:39: `lower_priority_timeslice` `3ms` is out of range: from 50us to 2ms"},
    {"LowerTimesliceFinerThanMicroseconds", "scheduler: {lower_priority_timeslice: 100500ns}\ntenants:\n  - name: a\n",
     "1:39: `lower_priority_timeslice` `100500ns` is finer than the GPU takes: write whole microseconds"},
    {"LowerTimesliceNotADuration", "scheduler: {lower_priority_timeslice: short}\ntenants:\n  - name: a\n",
     "1:39: bad duration `short` for `lower_priority_timeslice`: *"},
    // Negative and overflowing numbers.
    {"NegativeUid", "tenants:\n  - name: a\n    match: {uid: -1}\n",
     "3:18: bad `uid` `-1`: cannot be negative; expected a numeric id from 0 to 4294967294"},
    {"UidPast32Bits", "tenants:\n  - name: a\n    match: {uid: 4294967296}\n",
     "3:18: bad `uid` `4294967296`: expected a numeric id from 0 to 4294967294"},
    {"UidThatIsNoOnesId", "tenants:\n  - name: a\n    match: {gid: 4294967295}\n",
     "3:18: bad `gid` `4294967295`: expected a numeric id from 0 to 4294967294"},
    {"UidPast64Bits", "tenants:\n  - name: a\n    match: {uid: 99999999999999999999999}\n",
     "3:18: bad `uid` `99999999999999999999999`: expected a numeric id from 0 to 4294967294"},
    {"NegativePort", "scheduler: {metrics_port: -9400}\ntenants:\n  - name: a\n",
     "1:27: bad `metrics_port` `-9400`: cannot be negative; expected a TCP port from 1 to 65535"},
    {"PortPast16Bits", "scheduler: {metrics_port: 65536}\ntenants:\n  - name: a\n",
     "1:27: bad `metrics_port` `65536`: expected a TCP port from 1 to 65535"},
    {"PortZero", "scheduler: {metrics_port: 0}\ntenants:\n  - name: a\n",
     "1:27: bad `metrics_port` `0`: expected a TCP port from 1 to 65535"},
    // The size parser's own wording is its business; the place and the quoting are ours.
    {"NegativeMemory", "tenants:\n  - name: a\n    memory: -1GiB\n", "3:13: bad size `-1GiB` for `memory`: *"},
    {"OverflowingMemory", "tenants:\n  - name: a\n    memory: 99999999999999999999TiB\n",
     "3:13: bad size `99999999999999999999TiB` for `memory`: *"},
    {"NegativeQuantum", "scheduler: {quantum: -20ms}\ntenants:\n  - name: a\n",
     "1:22: bad duration `-20ms` for `quantum`: *"},
    // Names: printable ASCII of a few kinds only, quoted escaped.
    {"NameWithANewline", "tenants:\n  - name: \"a\\nINFO forged line\"\n",
     "2:11: bad tenant name `a\\nINFO forged line`: 1 to 63 characters of letters, digits, '-', '_' or '.'"},
    {"NameThatIsNotUtf8", "tenants:\n  - name: a\xff\xfe\n",
     "2:11: bad tenant name `a\\xff\\xfe`: 1 to 63 characters of letters, digits, '-', '_' or '.'"},
    {"NameWithAControlCharacter", "tenants:\n  - name: \"a\\x1b[31m\"\n",
     "2:11: bad tenant name `a\\x1b[31m`: 1 to 63 characters of letters, digits, '-', '_' or '.'"},
    {"NameWithABidiOverride", "tenants:\n  - name: \"a\\u202Eb\"\n",
     "2:11: bad tenant name `a\\u202eb`: 1 to 63 characters of letters, digits, '-', '_' or '.'*"},
    // A long value is quoted in part.
    {"LongValueQuotedInPart",
     "tenants:\n  - name: a\n    priority: "
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
     "3:15: bad priority `xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...`: expected high, normal or low"},
    {"LongOnViolationQuotedInPart",
     "tenants:\n  - name: a\n    on_violation: "
     "\"kill\\nERROR forged line zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\"\n",
     "3:19: bad on_violation `kill\\nERROR forged line zzzzzzzzzzzzzzzzz...`: expected report or kill"},
    {"LongUnknownKeyQuotedInPart",
     "tenants:\n  - name: a\n    "
     "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy: 1\n",
     "3:5: unknown key `yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy...` (expected one of: name, priority, *"},
    // Empty, in its two forms.
    {"EmptyFile", "", "0:0: the file is empty: expected `scheduler:` and `tenants:`"},
    {"OnlyAComment", "# nothing yet\n", "0:0: the file is empty: expected `scheduler:` and `tenants:`"},
};

INSTANTIATE_TEST_SUITE_P(Table, Refused, ::testing::ValuesIn(kRefusals),
                         [](const ::testing::TestParamInfo<Refusal>& info) { return std::string(info.param.name); });

// What is still accepted at the edges of the ranges above.
TEST(Accepted, TheEdgesOfEachRange) {
  TempDir dir;
  const std::string file = dir.write("cuslice.yaml",
                                     "scheduler: {quantum: 1ms, limit_window: 60s, metrics_port: 65535,\n"
                                     "            lower_priority_timeslice: 50us}\n"
                                     "tenants:\n"
                                     "  - name: a\n    memory: 0.0001%\n    compute: {share: 99%, limit: 99%}\n"
                                     "    match: {uid: 4294967294, gid: 0}\n"
                                     "  - name: b\n    memory: 1B\n");
  const ConfigResult r = load_config_file(file);
  ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
  EXPECT_EQ(r.config.scheduler.quantum, kMinQuantum);
  EXPECT_EQ(r.config.scheduler.limit_window, kMaxLimitWindow);
  EXPECT_EQ(r.config.scheduler.lower_priority_timeslice, kMinLowerTimeslice);
  EXPECT_EQ(r.config.tenants[0].memory->percent, 0.0001);
  EXPECT_EQ(r.config.tenants[0].match.uid, 4294967294u);
  EXPECT_EQ(r.config.tenants[1].memory->bytes, 1u);
  // b takes what a leaves: exactly the minimum.
  EXPECT_EQ(r.config.effective_shares(0), (std::vector<double>{99, 1}));
}

TEST(FileLimits, ADirectoryIsRefusedByName) {
  TempDir dir;
  const ConfigResult r = load_config_file(dir.path());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), dir.path() + ": is a directory, not a configuration file");
}

TEST(FileLimits, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.path() + "/cuslice.yaml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const ConfigResult r = load_config_file(fifo);  // would hang in open() without O_NONBLOCK
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), fifo + ": is not a regular file (a device, FIFO or socket)");
}

TEST(FileLimits, ADeviceIsRefused) {
  const ConfigResult r = load_config_file("/dev/zero");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), "/dev/zero: is not a regular file (a device, FIFO or socket)");
}

// The largest file is parsed; one byte more is refused before parsing.
TEST(FileLimits, OneMebibyteIsTheMost) {
  TempDir dir;
  const std::string head = "tenants:\n  - name: a\n";
  std::string text = head + "#" + std::string(kMaxConfigFileBytes - head.size() - 2, 'x') + "\n";
  ASSERT_EQ(text.size(), kMaxConfigFileBytes);
  const ConfigResult fits = load_config_file(dir.write("fits.yaml", text));
  EXPECT_TRUE(fits.ok()) << fits.errors[0].to_string();

  const std::string big = dir.write("big.yaml", text + "\n");
  const ConfigResult r = load_config_file(big);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), big + ": is 1048577 bytes, more than a configuration may have (1048576)");
}

TEST(FileLimits, AFileThatCannotBeOpenedSaysWhy) {
  TempDir dir;
  const std::string file = dir.write("secret.yaml", "tenants:\n  - name: a\n");
  chmod(file.c_str(), 0);
  if (access(file.c_str(), R_OK) == 0) GTEST_SKIP() << "running as root: the mode does not keep us out";
  const ConfigResult r = load_config_file(file);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].to_string(), file + ": cannot read the file: Permission denied");
}

// A file of a thousand mistakes lists the first kMaxConfigErrors and says how many more.
TEST(ErrorList, IsCutShortWithACount) {
  TempDir dir;
  std::string yaml = "tenants:\n";
  for (int i = 0; i < 60; ++i) yaml += "  - name: t" + std::to_string(i) + "\n    priority: top\n";
  const std::string file = dir.write("cuslice.yaml", yaml);
  const ConfigResult r = load_config_file(file);
  ASSERT_EQ(r.errors.size(), kMaxConfigErrors + 1);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_EQ(r.errors.back().to_string(), file + ": 10 more errors not shown");
}

struct Excerpt {
  const char* in;
  const char* out;
};

class Excerpts : public ::testing::TestWithParam<Excerpt> {};

TEST_P(Excerpts, AreShortAndEscaped) { EXPECT_EQ(excerpt(GetParam().in), GetParam().out); }

INSTANTIATE_TEST_SUITE_P(
    Table, Excerpts,
    ::testing::Values(Excerpt{"20ms", "20ms"}, Excerpt{"", ""}, Excerpt{"a\nb", "a\\nb"}, Excerpt{"tab\there", "tab\\there"},
                      Excerpt{"\x01\x7f", "\\x01\\x7f"}, Excerpt{"\xff", "\\xff"}, Excerpt{"caf\xc3\xa9", "caf\xc3\xa9"},
                      Excerpt{"\xe2\x80\xae", "\\u202e"},
                      // 40 characters kept, then "..."; a UTF-8 character is not cut in two.
                      Excerpt{"0123456789012345678901234567890123456789x", "0123456789012345678901234567890123456789..."},
                      Excerpt{"012345678901234567890123456789012345678\xc3\xa9", "012345678901234567890123456789012345678..."}));

}  // namespace
}  // namespace cuslice
