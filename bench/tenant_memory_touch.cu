// The kernel bench/tenant_memory_worker.cpp launches over the memory it holds, built into a
// fatbin of its own (nvcc -fatbin) that the worker loads only when it first needs it: its
// code then takes device memory that no allocation call asks for.
extern "C" __global__ void touch(unsigned char* p, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n; i += 1ull * gridDim.x * blockDim.x)
    p[i] = static_cast<unsigned char>(i);
}
