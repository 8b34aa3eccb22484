// Fuzz target: the one parser of sizes, durations and percentages (config/size.h), shared by
// the hook, the YAML and the CLI, in each of its forms, and the hook's variables read on top
// of it (hook/base/settings.h). Checks the contract: a parse either fails with a reason or yields
// a value in range, and resolving a percentage against any card size is defined.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/size.h"
#include "hook/base/settings.h"

namespace {

void require(bool holds) {
  if (!holds) std::abort();
}

bool settings_valid_or_explained() {
  const cuslice::Settings& s = cuslice::settings();
  return s.valid || s.error[0] != '\0';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cuslice;
  if (size > 256) return -1;  // values people write are short; longer adds nothing
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  for (const SizeForms forms : {SizeForms{}, SizeForms{.bare_bytes = true, .percent = true},
                                 SizeForms{.bare_bytes = true, .percent = false}}) {
    SizeSpec spec;
    const char* why = nullptr;
    if (parse_size(text, spec, &why, forms)) {
      if (spec.kind == SizeSpec::Kind::kPercent) {
        require(forms.percent && spec.percent > 0.0 && spec.percent <= 100.0);
        for (uint64_t card : {uint64_t{0}, uint64_t{80} << 30, UINT64_MAX}) require(spec.resolve(card) <= card);
      }
    } else {
      require(why != nullptr && why[0] != '\0');
    }
  }
  uint64_t ns = 0;
  const char* why = nullptr;
  if (parse_duration(text, ns, &why)) require(ns <= kMaxDurationNs);
  else require(why != nullptr && why[0] != '\0');
  double percent = 0;
  if (parse_percent(text, percent, &why)) require(percent > 0.0 && percent <= 100.0);
  else require(why != nullptr && why[0] != '\0');

  // The hook reads NUL-terminated variables: the memory limit, and its durations and byte
  // counts through load_settings() (which parses again on every call).
  const std::string variable(text);
  if (variable.find('\0') != std::string::npos) return 0;
  Settings settings;
  if (!parse_memory_limit(variable.c_str(), settings)) require(settings.error[0] != '\0');
  for (const char* name : {"CUSLICE_MAX_QUEUED", "CUSLICE_PREEMPT_QUEUED", "CUSLICE_PARK_QUEUED",
                           "CUSLICE_CONTEXT_BYTES", "CUSLICE_CONTEXT_HEADROOM",
                           "CUSLICE_CONTEXT_WARMUP"}) {
    setenv(name, variable.c_str(), 1);
    load_settings();
    require(settings_valid_or_explained());
    unsetenv(name);
  }
  return 0;
}
