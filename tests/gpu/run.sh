#!/usr/bin/env bash
# The GPU test suite, on a machine with an NVIDIA GPU:
#
#   bash tests/gpu/run.sh --cuslice PATH [--only NAME ...]
#   bash tests/gpu/run.sh [--only NAME ...]          # the memory suite only, hook built here
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Runs
#   1. the memory suite (suite.py): every scenario under LD_PRELOAD + CUSLICE_MEMORY_LIMIT=4GiB
#      (PyTorch, JAX, CuPy, static-cudart C++), then prints its table;
#   2. with a scheduler (--cuslice), the checks under a cuslice-scheduler: smi_filter
#      (nvidia-smi in a tenant lists only its tenant), captures (CUDA-graph captures beside a
#      lower-priority GEMM loop), context_reset (cudaDeviceReset and calls that wait in the
#      driver below a higher-priority tenant), time_slices (the lower tenant's GPU time slices
#      shortened and read back on this driver, a probe's p99 beside 5 ms kernels), cli_live
#      (`cuslice run` and `cuslice status`), spatial (tenants side by side through the MPS
#      daemon the scheduler starts).
# Without --cuslice the hook is built from this checkout (cmake and the CUDA toolkit suffice)
# and the scheduler checks are skipped. --only NAME: scenarios of the memory suite and checks
# whose name contains NAME. Needs nvcc; PyTorch (with torchvision for captures), JAX and CuPy
# for their scenarios. Logs go to $OUT (default build-gpu/out). Exit status: 0 when everything
# that ran passed (a check that cannot run here, e.g. without PyTorch, is skipped), 1 on any
# failure, 2 when there is no GPU.
# Environment: CUDA_ARCH (default sm_90), PYTHON (default python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
build=$root/build-gpu
OUT=${OUT:-$build/out}
mkdir -p "$OUT" "$build/gpu-tests"
blog=$OUT/gpu_build.log
: >"$blog"

path=""
only=()
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --only) shift; while (($#)) && [[ $1 != --* ]]; do only+=("$1"); shift; done ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument $1 (see --help)"; exit 2 ;;
  esac
done

command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader | tee -a "$blog"

tree=""
if [ -n "$path" ]; then
  tree=$(cuslice_tree "$path") || exit 2
  hook=$tree/lib/libcuslice.so
  echo "cuslice: $tree ($(cuslice_version "$tree"))"
else
  hook=$build/hook/libcuslice.so
  echo "== building the hook (build-gpu)" | tee -a "$blog"
  { cmake -S "$root" -B "$build" -G Ninja -DCUSLICE_HOOK_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
      && cmake --build "$build" --target cuslice; } >>"$blog" 2>&1 \
    || { echo "hook build failed"; tail -30 "$blog"; exit 1; }
fi
[ -f "$hook" ] || { echo "no hook at $hook"; exit 1; }
echo "hook: $hook"

wanted() {  # wanted NAME: no --only, or an --only word is part of NAME
  local o
  ((${#only[@]})) || return 0
  for o in "${only[@]}"; do [[ $1 == *"$o"* ]] && return 0; done
  return 1
}

status=0
echo "== building the CUDA test programs" | tee -a "$blog"
arch=${CUDA_ARCH:-sm_90}
nvcc -O2 -std=c++17 -arch="$arch" -o "$build/gpu-tests/cuda_quota" "$here/cuda_quota.cu" >>"$blog" 2>&1 &
legacy=$!
nvcc -O2 -std=c++17 -arch="$arch" --default-stream per-thread \
  -o "$build/gpu-tests/cuda_quota_ptds" "$here/cuda_quota.cu" >>"$blog" 2>&1
ptds=$?
wait $legacy && [ $ptds -eq 0 ] || { echo "nvcc failed"; tail -20 "$blog"; exit 1; }

if ((${#only[@]})); then
  python3 "$here/suite.py" --hook "$hook" --bin "$build/gpu-tests" --out "$OUT" --only "${only[@]}" || status=1
else
  python3 "$here/suite.py" --hook "$hook" --bin "$build/gpu-tests" --out "$OUT" || status=1
fi

checks=(smi_filter captures context_reset time_slices cli_live spatial device_plugin dra_plugin)
if [ -z "$tree" ]; then
  echo "SKIP: the scheduler checks (${checks[*]}) need cuslice-scheduler: pass --cuslice PATH"
  exit $status
fi
for check in "${checks[@]}"; do
  wanted "$check" || continue
  echo "== $check"
  case $check in
    smi_filter) bash "$here/smi_filter.sh" --cuslice "$tree" ;;
    captures) bash "$here/capture_stress.sh" --cuslice "$tree" 2 5 ;;
    context_reset) bash "$here/context_reset.sh" --cuslice "$tree" --runs 2 --phases 3 ;;
    time_slices) bash "$here/time_slices.sh" --cuslice "$tree" ;;
    cli_live) bash "$here/cli_live.sh" --cuslice "$tree" ;;
    spatial) bash "$here/spatial.sh" --cuslice "$tree" ;;
    device_plugin) bash "$here/device_plugin.sh" --cuslice "$tree" ;;
    dra_plugin) bash "$here/dra_plugin.sh" --cuslice "$tree" ;;
  esac 2>&1 | tee "$OUT/$check.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) echo "[PASS] $check" ;;
    2) echo "[SKIP] $check (cannot run here: $OUT/$check.log)" ;;
    *) echo "[FAIL] $check (exit $rc, $OUT/$check.log)"; status=1 ;;
  esac
done
exit $status
