// SuspensionJournal (suspension_journal.h): the JSON form, through nlohmann::json.
#include "scheduler/preemption/suspension_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cuslice {

namespace {

// All of `text` to fd; false on a short write that cannot go on.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The whole regular file at `path`, never through a link; nullopt when absent or refused.
std::optional<std::string> read_file(const std::string& path, std::string& why) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) why = std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  std::string text;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "not a regular file";
    close(fd);
    return std::nullopt;
  }
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

}  // namespace

void SuspensionJournal::write(const std::vector<JournalEntry>& entries) const {
  if (entries.empty()) {
    unlink(path_.c_str());
    return;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const JournalEntry& e : entries) {
    nlohmann::json processes = nlohmann::json::array();
    for (const JournalEntry::Process& p : e.processes)
      processes.push_back({{"pid", p.pid}, {"start_time", p.start_time}, {"bytes", p.bytes}});
    out.push_back({{"tenant", e.tenant}, {"state", e.state}, {"reason", e.reason}, {"processes", processes}});
  }
  // A fresh file (O_EXCL after removing whatever was there, a link included): nothing that
  // stood at the temporary name is opened, let alone followed.
  const std::string temporary = path_ + ".new";
  unlink(temporary.c_str());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && write_all(fd, out.dump(2) + "\n");
  const int err = errno;
  if (fd >= 0) close(fd);
  if (!written) {
    spdlog::error("cannot write {}: {}; a restarted scheduler would not know what is suspended", temporary,
                  std::strerror(err));
    unlink(temporary.c_str());
    return;
  }
  // rename replaces a link at path_ itself, never its target.
  if (rename(temporary.c_str(), path_.c_str()) != 0) spdlog::error("cannot write {}: {}", path_, std::strerror(errno));
}

std::vector<JournalEntry> SuspensionJournal::read() const {
  std::vector<JournalEntry> entries;
  std::string why;
  const std::optional<std::string> text = read_file(path_, why);
  if (!text) {
    if (!why.empty())
      spdlog::error("{}: not read ({}); tenants it names as suspended stay suspended: resume them with "
                    "`cuda-checkpoint --toggle --pid PID`",
                    path_, why);
    return entries;
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    spdlog::error("{}: unreadable ({}); tenants it names as suspended stay suspended: resume them with "
                  "`cuda-checkpoint --toggle --pid PID`",
                  path_, e.what());
    return entries;
  }
  if (!json.is_array()) return entries;
  for (const nlohmann::json& entry : json) {
    if (!entry.is_object() || !entry.contains("tenant") || !entry.contains("processes")) continue;
    JournalEntry e;
    try {
      e.tenant = entry.value("tenant", "");
      e.state = entry.value("state", "");
      e.reason = entry.value("reason", "");
      for (const nlohmann::json& p : entry["processes"])
        e.processes.push_back({p.value("pid", 0), p.value("start_time", uint64_t{0}),
                               p.value("bytes", std::vector<uint64_t>{})});
    } catch (const nlohmann::json::exception& error) {
      spdlog::error("{}: an entry is malformed ({}): skipped", path_, error.what());
      continue;
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace cuslice
