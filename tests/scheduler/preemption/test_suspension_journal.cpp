// SuspensionJournal: what a restarted scheduler reads of what an earlier one suspended.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "scheduler/preemption/suspension_journal.h"

namespace cuslice {
namespace {

class SuspensionJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("journal-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path() const { return (dir_ / "sock.suspended.json").string(); }
  void write_text(const std::string& text) const { std::ofstream(path()) << text; }
  static std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::filesystem::path dir_;
};

TEST_F(SuspensionJournalTest, ReadsBackWhatItWrote) {
  SuspensionJournal journal(path());
  journal.write({{"batch", "suspended", "room for serve", {{123, 456, {1u << 20, 0, 7}}, {124, 457, {}}}}});
  const std::vector<JournalEntry> entries = journal.read();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].tenant, "batch");
  EXPECT_EQ(entries[0].state, "suspended");
  EXPECT_EQ(entries[0].reason, "room for serve");
  ASSERT_EQ(entries[0].processes.size(), 2u);
  EXPECT_EQ(entries[0].processes[0].pid, 123);
  EXPECT_EQ(entries[0].processes[0].start_time, 456u);
  EXPECT_EQ(entries[0].processes[0].bytes, (std::vector<uint64_t>{1u << 20, 0, 7}));
  EXPECT_FALSE(std::filesystem::exists(path() + ".new"));
}

TEST_F(SuspensionJournalTest, NothingSuspendedRemovesTheJournal) {
  SuspensionJournal journal(path());
  journal.write({{"batch", "suspended", "", {{1, 2, {3}}}}});
  ASSERT_TRUE(std::filesystem::exists(path()));
  journal.write({});
  EXPECT_FALSE(std::filesystem::exists(path()));
  EXPECT_TRUE(journal.read().empty());
}

TEST_F(SuspensionJournalTest, UnreadableOrMalformedEntriesAreSkippedNotFatal) {
  SuspensionJournal journal(path());
  write_text("{ not json");
  EXPECT_TRUE(journal.read().empty());
  write_text(R"({"tenant": "a"})");  // not an array
  EXPECT_TRUE(journal.read().empty());
  // One good entry among ones without processes, of the wrong types, or not objects.
  write_text(R"([1, {"tenant": "a"}, {"tenant": "b", "processes": [{"pid": "x"}]},
                 {"tenant": "c", "processes": [7]},
                 {"tenant": "d", "state": "suspended", "processes": [{"pid": 5, "start_time": 6, "bytes": [8]}]}])");
  const std::vector<JournalEntry> entries = journal.read();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].tenant, "d");
  EXPECT_EQ(entries[0].processes[0].pid, 5);
}

// Whoever could put a link where the journal is written must not get the scheduler to write
// (as root) through it, nor to read another file as the journal.
TEST_F(SuspensionJournalTest, LinksInTheJournalsPlaceAreNeverFollowed) {
  const std::filesystem::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious\n";
  std::filesystem::create_symlink(victim, path() + ".new");
  SuspensionJournal journal(path());
  journal.write({{"batch", "suspended", "", {{1, 2, {3}}}}});
  EXPECT_EQ(read_text(victim), "precious\n") << "written through a link at the temporary name";
  EXPECT_FALSE(std::filesystem::is_symlink(path() + ".new"));
  ASSERT_EQ(journal.read().size(), 1u);

  std::filesystem::remove(path());
  std::ofstream(victim) << R"([{"tenant": "x", "processes": [{"pid": 9}]}])";
  std::filesystem::create_symlink(victim, path());
  EXPECT_TRUE(journal.read().empty()) << "read another file through a link as the journal";
  journal.write({{"batch", "suspended", "", {{1, 2, {3}}}}});
  EXPECT_FALSE(std::filesystem::is_symlink(path())) << "the link is replaced, not written through";
  EXPECT_EQ(read_text(victim), R"([{"tenant": "x", "processes": [{"pid": 9}]}])");
}

}  // namespace
}  // namespace cuslice
