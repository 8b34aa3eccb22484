// Runs a fuzz target's LLVMFuzzerTestOneInput over files, for builds without libFuzzer: each
// argument is a file or a folder of files (the checked-in corpus and the inputs that once
// crashed). A crash or a broken invariant aborts, and ctest reports the file being run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "%s\n", file.c_str());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    if (!std::filesystem::exists(arg)) {
      std::fprintf(stderr, "%s: no such file or folder\n", arg.c_str());
      return 1;
    }
    if (!std::filesystem::is_directory(arg)) {
      run_file(arg);
      ++files;
      continue;
    }
    for (const auto& entry : std::filesystem::directory_iterator(arg)) {
      if (!entry.is_regular_file() || entry.path().filename().string().front() == '.') continue;
      run_file(entry.path());
      ++files;
    }
  }
  std::printf("%zu inputs ran\n", files);
  return files > 0 ? 0 : 1;  // an empty corpus is a mistake, not a pass
}
