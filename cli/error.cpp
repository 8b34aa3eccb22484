#include "cli/error.h"

#include <cstdio>

namespace cuslice::cli {

void print_error(std::string_view command, std::string_view message, std::string_view hint) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(command.size()), command.data(),
               static_cast<int>(message.size()), message.data());
  if (!hint.empty()) std::fprintf(stderr, "  %.*s\n", static_cast<int>(hint.size()), hint.data());
}

}  // namespace cuslice::cli
