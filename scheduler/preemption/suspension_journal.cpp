// SuspensionJournal (suspension_journal.h): the JSON form, through nlohmann::json.
#include "suspension_journal.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace cuslice {

void SuspensionJournal::write(const std::vector<JournalEntry>& entries) const {
  if (entries.empty()) {
    std::remove(path_.c_str());
    return;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const JournalEntry& e : entries) {
    nlohmann::json processes = nlohmann::json::array();
    for (const JournalEntry::Process& p : e.processes)
      processes.push_back({{"pid", p.pid}, {"start_time", p.start_time}, {"bytes", p.bytes}});
    out.push_back({{"tenant", e.tenant}, {"state", e.state}, {"reason", e.reason}, {"processes", processes}});
  }
  const std::string temporary = path_ + ".new";
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << out.dump(2) << "\n";
    if (!file) {
      spdlog::error("cannot write {}: a restarted scheduler would not know what is suspended", temporary);
      return;
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path_, error);
  if (error) spdlog::error("cannot write {}: {}", path_, error.message());
}

std::vector<JournalEntry> SuspensionJournal::read() const {
  std::vector<JournalEntry> entries;
  std::ifstream in(path_);
  if (!in) return entries;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
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
