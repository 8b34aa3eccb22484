#include "cli/atomic_write.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "cli/error.h"
#include "common/atomic_file.h"

namespace cuslice::cli {
namespace {

[[noreturn]] void fail(const std::filesystem::path& target, int err) {
  std::string hint;
  if (err == EACCES || err == EPERM || err == EROFS)
    hint = "write somewhere you may, or run with the privileges that directory needs";
  else if (err == ENOENT)
    hint = "create the directory first";
  throw Error(ExitCode::kFailure, "cannot write " + target.string() + ": " + std::strerror(err),
              hint);
}

}  // namespace

void write_file_atomically(const std::filesystem::path& target, std::string_view content) {
  if (const int err = write_file(target.string(), content); err != 0) fail(target, err);
}

}  // namespace cuslice::cli
