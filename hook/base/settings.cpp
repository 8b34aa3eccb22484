#include "hook/base/settings.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "hook/base/log.h"

namespace cuslice {
namespace {

Settings g_settings;

void fail(Settings& s, const char* var, const char* value, const char* why) {
  s.valid = false;
  std::snprintf(s.error, sizeof s.error, "%s='%s' is not valid: %s", var, value, why);
}

bool parse_log_level(const char* v, log::Level& out) {
  static constexpr struct {
    const char* name;
    log::Level level;
  } kLevels[] = {{"off", log::Level::kOff},     {"error", log::Level::kError},
                 {"warn", log::Level::kWarn},   {"warning", log::Level::kWarn},
                 {"info", log::Level::kInfo},   {"debug", log::Level::kDebug}};
  for (const auto& l : kLevels)
    if (std::strcmp(v, l.name) == 0) {
      out = l.level;
      return true;
    }
  return false;
}

// The hook's sizes: a bare number is a byte count, as the variables' names and defaults say.
constexpr SizeForms kLimitForms{.bare_bytes = true, .percent = true};
constexpr SizeForms kByteForms{.bare_bytes = true, .percent = false};

void read_bytes(Settings& s, const char* var, uint64_t& out) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return;
  SizeSpec spec;
  const char* why = nullptr;
  if (!parse_size(v, spec, &why, kByteForms))
    fail(s, var, v, why);
  else
    out = spec.bytes;
}

void read_duration(Settings& s, const char* var, uint64_t& out_ns) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return;
  const char* why = nullptr;
  if (!parse_duration(v, out_ns, &why)) fail(s, var, v, why);
}

}  // namespace

bool parse_memory_limit(const char* text, Settings& s) {
  std::string_view rest(text);
  const char* why = nullptr;
  // Either one size for every device, or "ordinal:size" items separated by commas.
  if (rest.find(':') == std::string_view::npos) {
    SizeSpec spec;
    if (!parse_size(rest, spec, &why, kLimitForms)) {
      fail(s, "CUSLICE_MEMORY_LIMIT", text, why);
      return false;
    }
    for (int d = 0; d < kMaxDevices; ++d) {
      s.limit[d] = spec;
      s.has_limit[d] = true;
    }
    s.any_limit = true;
    return true;
  }
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    size_t colon = item.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      fail(s, "CUSLICE_MEMORY_LIMIT", text, "per-device form is ORDINAL:SIZE[,ORDINAL:SIZE...]");
      return false;
    }
    int ordinal = 0;
    for (char c : item.substr(0, colon)) {
      if (c < '0' || c > '9' || ordinal >= kMaxDevices) {
        fail(s, "CUSLICE_MEMORY_LIMIT", text, "device ordinal must be a number below 64");
        return false;
      }
      ordinal = ordinal * 10 + (c - '0');
    }
    if (ordinal >= kMaxDevices) {
      fail(s, "CUSLICE_MEMORY_LIMIT", text, "device ordinal must be a number below 64");
      return false;
    }
    SizeSpec spec;
    if (!parse_size(item.substr(colon + 1), spec, &why, kLimitForms)) {
      fail(s, "CUSLICE_MEMORY_LIMIT", text, why);
      return false;
    }
    s.limit[ordinal] = spec;
    s.has_limit[ordinal] = true;
    s.any_limit = true;
  }
  return true;
}

void load_settings() {
  Settings& s = g_settings;
  s = Settings{};
  if (const char* v = std::getenv("CUSLICE_LOG_LEVEL"); v != nullptr && *v != '\0') {
    if (!parse_log_level(v, log::g_level))
      fail(s, "CUSLICE_LOG_LEVEL", v, "use off, error, warn, info or debug");
  }
  if (const char* v = std::getenv("CUSLICE_MEMORY_LIMIT"); v != nullptr && *v != '\0')
    parse_memory_limit(v, s);
  read_bytes(s, "CUSLICE_CONTEXT_BYTES", s.context_bytes);
  read_bytes(s, "CUSLICE_CONTEXT_HEADROOM", s.context_headroom);
  read_duration(s, "CUSLICE_CONTEXT_WARMUP", s.context_warmup_ns);
  read_duration(s, "CUSLICE_MAX_QUEUED", s.max_queued_ns);
  read_duration(s, "CUSLICE_PREEMPT_QUEUED", s.preempt_queued_ns);
  read_duration(s, "CUSLICE_PARK_QUEUED", s.park_queued_ns);
  if (const char* v = std::getenv("CUSLICE_MOVABLE_MEMORY"); v != nullptr && *v != '\0') {
    if (std::string_view(v) == "0") s.movable_memory = false;
    else if (std::string_view(v) != "1") fail(s, "CUSLICE_MOVABLE_MEMORY", v, "use 0 or 1");
  }
}

const Settings& settings() { return g_settings; }

}  // namespace cuslice
