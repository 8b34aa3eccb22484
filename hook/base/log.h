// The hook's logging: silent by default, one env variable (CUSLICE_LOG_LEVEL) to raise it,
// stderr only (never stdout: applications parse it). printf-style into a stack buffer and a
// single write(2): no allocation, no locks, safe from any thread. Never call it on a hot path
// except behind a level check that is false by default.
#pragma once

namespace cuslice::log {

enum class Level : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// Set once at initialisation (settings.cpp); errors are shown unless the user asks for "off".
extern Level g_level;

inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(g_level); }

void write(Level l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace cuslice::log

#define CUSLICE_LOG(level, ...)                                                    \
  do {                                                                             \
    if (::cuslice::log::enabled(::cuslice::log::Level::level))                     \
      ::cuslice::log::write(::cuslice::log::Level::level, __VA_ARGS__);            \
  } while (0)
