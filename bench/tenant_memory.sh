#!/usr/bin/env bash
# A tenant's memory as the driver counts it, on a real GPU: 32 processes of one tenant with a
# 24 GiB quota fill it at once, then load and launch a kernel over what they hold, then try to
# fill again; after each step the driver's per-process memory (NVML) is set against the
# quota, per process and for the tenant (bench/tenant_memory.py says what is printed).
#
#   bash bench/tenant_memory.sh --cuslice PATH [--processes N] [--quota-gib G]
#
# --cuslice PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs an NVIDIA GPU with room for the quota and N contexts, the
# CUDA toolkit (nvcc) and python3; takes well under 2 minutes. Exit 0: the fill reached 95%
# of the quota and the tenant was never over it; 1: not; 2: no GPU or no cuslice here.
# Environment: CUDA_ARCH (default sm_90), OUT (default build-gpu/out).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/build-gpu
OUT=${OUT:-$build/out}
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
[ "${1:-}" = --cuslice ] || { echo "usage: $0 --cuslice PATH [--processes N] [--quota-gib G]"; exit 2; }
. "$root/scripts/cuslice-tree.sh"
tree=$(cuslice_tree "${2:?--cuslice needs a path}") || exit 2
shift 2
mkdir -p "$OUT" "$build/bench"
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
nvcc -fatbin -arch="${CUDA_ARCH:-sm_90}" -o "$build/bench/tenant_memory_touch.fatbin" "$here/tenant_memory_touch.cu" &&
  g++ -O2 -std=c++17 -I"$cuda/include" -o "$build/bench/tenant_memory_worker" "$here/tenant_memory_worker.cpp" \
    -L"$cuda/lib64/stubs" -lcuda || { echo "building the worker failed"; exit 1; }
exec timeout 115 python3 "$here/tenant_memory.py" --tree "$tree" --worker "$build/bench/tenant_memory_worker" \
  --kernel "$build/bench/tenant_memory_touch.fatbin" --out "$OUT" "$@"
