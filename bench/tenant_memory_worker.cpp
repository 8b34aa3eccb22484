// One worker of bench/tenant_memory.py: a process of a tenant that fills the memory its
// tenant's quota lets it have, through the driver API, driven by commands on stdin, one a
// line, each answered by one line on stdout ("@ ..."):
//
//   (start)  cuInit and the primary context, made current       -> @ ready
//   fill     cuMemAlloc of 64 MiB blocks, halving the size at each refusal down to 2 MiB
//                                                                 -> @ filled BYTES BLOCKS
//   touch    loads the kernel's module (FATBIN, the first argument) if not yet loaded and
//            launches it over every block: code loaded now takes memory no allocation call
//            asks for                                             -> @ touched
//   (stdin closed) frees everything and exits 0
//
// Build: g++ -O2 -I/usr/local/cuda/include -o tenant_memory_worker tenant_memory_worker.cpp -lcuda
#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct Block {
  CUdeviceptr p;
  size_t bytes;
};

void answer(const char* text) {
  std::printf("@ %s\n", text);
  std::fflush(stdout);
}

std::vector<char> read_file(const char* path) {
  std::vector<char> bytes;
  if (FILE* f = std::fopen(path, "rb")) {
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<char> image = argc > 1 ? read_file(argv[1]) : std::vector<char>();
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (image.empty() || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    answer(image.empty() ? "error no kernel image" : "error no context");
    return 1;
  }
  answer("ready");
  std::vector<Block> blocks;
  CUfunction touch = nullptr;
  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    line[std::strcspn(line, "\n")] = '\0';
    if (std::strcmp(line, "fill") == 0) {
      size_t got = 0, count = 0;
      for (size_t chunk = 64 * kMiB; chunk >= 2 * kMiB;) {
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, chunk) == CUDA_SUCCESS) {
          blocks.push_back({p, chunk});
          got += chunk;
          ++count;
        } else {
          chunk /= 2;
        }
      }
      char text[64];
      std::snprintf(text, sizeof text, "filled %zu %zu", got, count);
      answer(text);
    } else if (std::strcmp(line, "touch") == 0) {
      CUmodule module = nullptr;
      if (touch == nullptr && (cuModuleLoadData(&module, image.data()) != CUDA_SUCCESS ||
                               cuModuleGetFunction(&touch, module, "touch") != CUDA_SUCCESS)) {
        answer("error cannot load the kernel");
        continue;
      }
      CUresult r = CUDA_SUCCESS;
      for (Block& b : blocks) {
        unsigned long long n = b.bytes;
        void* params[] = {&b.p, &n};
        if (r == CUDA_SUCCESS) r = cuLaunchKernel(touch, 264, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
      }
      if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
      const char* name = nullptr;
      cuGetErrorName(r, &name);
      answer(r == CUDA_SUCCESS ? "touched" : name != nullptr ? name : "error");
    } else {
      answer("error unknown command");
    }
  }
  for (const Block& b : blocks) cuMemFree(b.p);
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
