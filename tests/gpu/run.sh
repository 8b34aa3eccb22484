#!/usr/bin/env bash
# The GPU proof suite: builds libcuslice.so and the CUDA test programs, then runs every scenario
# of tests/gpu/suite.py under LD_PRELOAD + CUSLICE_MEMORY_LIMIT=4GiB and prints the table.
#
#   bash tests/gpu/run.sh [--only NAME ...]     # on a machine with an NVIDIA GPU
#
# Logs go to $OUT (default build-gpu/out): gpu_suite.log (every process's output), gpu_suite.md
# (the table), gpu_build.log. Exits non-zero when the build fails or any scenario fails.
# Environment: CUSLICE_HOOK=path skips the hook build; CUDA_ARCH (default sm_90).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build-gpu
OUT=${OUT:-$build/out}
mkdir -p "$OUT" "$build/gpu-tests"
blog=$OUT/gpu_build.log
: >"$blog"

command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader | tee -a "$blog"

hook=${CUSLICE_HOOK:-}
if [ -z "$hook" ]; then
  hook=$build/hook/libcuslice.so
  echo "== building the hook (build-gpu)" | tee -a "$blog"
  { cmake -S "$root" -B "$build" -G Ninja -DCUSLICE_HOOK_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
      && cmake --build "$build" --target cuslice; } >>"$blog" 2>&1 \
    || { echo "hook build failed"; tail -30 "$blog"; exit 1; }
fi
[ -f "$hook" ] || { echo "no hook at $hook"; exit 1; }
echo "hook: $hook"

echo "== building the CUDA test programs" | tee -a "$blog"
arch=${CUDA_ARCH:-sm_90}
nvcc -O2 -std=c++17 -arch="$arch" -o "$build/gpu-tests/cuda_quota" "$here/cuda_quota.cu" >>"$blog" 2>&1 &
legacy=$!
nvcc -O2 -std=c++17 -arch="$arch" --default-stream per-thread \
  -o "$build/gpu-tests/cuda_quota_ptds" "$here/cuda_quota.cu" >>"$blog" 2>&1
ptds=$?
wait $legacy && [ $ptds -eq 0 ] || { echo "nvcc failed"; tail -20 "$blog"; exit 1; }

python3 "$here/suite.py" --hook "$hook" --bin "$build/gpu-tests" --out "$OUT" "$@"
