// A libnvidia-ml.so.1 for tests that takes GPUs away while a program runs: it forwards each
// NVML call the node agents make (node/gpu_inventory.cpp) to the NVML file NVML_FAULT_REAL
// names (the fake one of tests/fake_driver), except that a GPU whose index is listed in the
// file NVML_FAULT_LOST names (read at every call: indices separated by commas, spaces or
// newlines; a missing file lists none) answers NVML_ERROR_GPU_IS_LOST, as a GPU that fell off
// the bus or was taken out by the driver after an error does. A test puts this library's
// folder first on the program's LD_LIBRARY_PATH.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void* nvmlDevice_t;

enum { kSuccess = 0, kUninitialized = 1, kFunctionNotFound = 13, kGpuIsLost = 15 };

#define EXPORT __attribute__((visibility("default")))

static void* real(const char* name) {
  static void* library;
  if (library == NULL) {
    const char* path = getenv("NVML_FAULT_REAL");
    if (path == NULL || (library = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
      fprintf(stderr, "nvml_fault: cannot open NVML_FAULT_REAL (%s): %s\n", path ? path : "unset", dlerror());
      return NULL;
    }
  }
  return dlsym(library, name);
}

// Forwards the call to the real NVML's function of the same name and type, or answers "not
// found" where it has none.
#define FORWARD(name, ...)                                      \
  do {                                                          \
    __typeof__(&name) f = (__typeof__(&name))real(#name);       \
    return f ? f(__VA_ARGS__) : kFunctionNotFound;              \
  } while (0)

static int lost(unsigned int index) {
  const char* path = getenv("NVML_FAULT_LOST");
  FILE* file = path ? fopen(path, "r") : NULL;
  if (file == NULL) return 0;
  char text[512] = {0};
  size_t n = fread(text, 1, sizeof text - 1, file);
  fclose(file);
  text[n] = '\0';
  for (char* p = strtok(text, ", \n\t"); p != NULL; p = strtok(NULL, ", \n\t"))
    if (strtoul(p, NULL, 10) == index && *p >= '0' && *p <= '9') return 1;
  return 0;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { FORWARD(nvmlInit_v2); }
EXPORT nvmlReturn_t nvmlInit(void) { FORWARD(nvmlInit); }
EXPORT nvmlReturn_t nvmlShutdown(void) { FORWARD(nvmlShutdown); }

EXPORT const char* nvmlErrorString(nvmlReturn_t rc) {
  if (rc == kGpuIsLost) return "GPU is lost";
  const char* (*f)(nvmlReturn_t) = (const char* (*)(nvmlReturn_t))real("nvmlErrorString");
  return f ? f(rc) : "NVML error";
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  FORWARD(nvmlDeviceGetCount_v2, count);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (lost(index)) return kGpuIsLost;
  FORWARD(nvmlDeviceGetHandleByIndex_v2, index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  FORWARD(nvmlDeviceGetUUID, device, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  FORWARD(nvmlDeviceGetName, device, name, length);
}

// nvmlMemory_t: total, free, used (unsigned long long each).
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, void* memory) {
  FORWARD(nvmlDeviceGetMemoryInfo, device, memory);
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  FORWARD(nvmlSystemGetDriverVersion, version, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  FORWARD(nvmlDeviceGetMinorNumber, device, minor);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  FORWARD(nvmlDeviceGetCudaComputeCapability, device, major, minor);
}
