#!/usr/bin/env bash
# What being preemptible costs a process that is never suspended, on a machine with an NVIDIA
# GPU: the hook's launch and allocation figures and the framework scenarios, each in a
# preemptible tenant, alternating with a tenant that is not preemptible and with the hook alone
# (or no cuslice at all), under one scheduler configuration.
#
#   bash bench/preemption/idle_cost.sh --cuslice PATH                      # every part, in turn
#   bash bench/preemption/idle_cost.sh --cuslice PATH --part launch [--rounds 8]
#   bash bench/preemption/idle_cost.sh --cuslice PATH --part alloc [--rounds 6]
#   bash bench/preemption/idle_cost.sh --cuslice PATH --part frameworks [--rounds 1] [--only torch]
#   bash bench/preemption/idle_cost.sh --cuslice PATH --part alloc --host-pool 24GiB   # with a pinned pool
#   bash bench/preemption/idle_cost.sh --part summary                      # the table again, no GPU
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). The parts:
#   launch      bench/run.sh --cuslice PATH --preemptible --in-process ROUNDS: in one process,
#               a launch through the hook against the driver's own, natively, with the hook
#               alone, in a tenant that is not preemptible and in a preemptible one;
#   alloc       bench/run.sh --cuslice PATH --preemptible ROUNDS: launch_alloc's calls
#               (launches, cudaMalloc/cudaFree, cudaMallocAsync, cuMemGetInfo) in the same
#               configurations and below a higher-priority tenant, round by round;
#   frameworks  tests/gpu/suite.py's PyTorch, JAX, CuPy and static-cudart scenarios under
#               CUSLICE_MEMORY_LIMIT=4GiB (--only, default: torch jax cupy cuda), with the hook
#               alone, in `solo` (not preemptible) and in `train` (preemptible), the order
#               turning from round to round.
# In both scheduler configurations `train` is preemptible (priority low, memory 100%,
# host_pool --host-pool if given: each of its processes then pins that much host memory as it
# starts, which these figures include) beside `serve` (priority high, a 40% quota) that never
# runs anything, so nothing is ever suspended; every tenant is joined by CUSLICE_TENANT
# (allow_env: true). Each part takes a few minutes (the first two about 3 on an H200 with the
# rounds above, frameworks about 2 a configuration: --only splits it); --part runs them one at a
# time, to keep each command short. The launch and alloc parts replace their earlier
# results; the frameworks part adds to them (a scenario run again counts its latest result), so
# that `--only torch` and then `--only jax cupy cuda-` make one table: remove
# $OUT/idle-cost/frameworks to start afresh. Every run ends with the summary
# (bench/preemption/idle_cost.py) of every part found under $OUT/idle-cost/: $OUT/idle-cost.md
# and $OUT/idle-cost.json. Exit status: 0 when every check passed, 1 when one failed, 2 when it
# could not run. Needs nvcc; PyTorch, JAX and CuPy for their scenarios.
# Environment: OUT (default build-gpu/out), CUDA_ARCH (default sm_90), PYTHON (default python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-$root/build-gpu/out}
dir=$OUT/idle-cost
py=${PYTHON:-python3}

path=""
parts=()
rounds=""
host_pool=""
only=()
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --part) parts+=("${2:?--part needs launch, alloc, frameworks, all or summary}"); shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --host-pool) host_pool=${2:?--host-pool needs a size, e.g. 24GiB}; shift 2 ;;
    --only) shift; while (($#)) && [[ $1 != --* ]]; do only+=("$1"); shift; done ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument $1 (see --help)"; exit 2 ;;
  esac
done
((${#parts[@]})) || parts=(all)
for p in "${parts[@]}"; do
  case $p in
    launch | alloc | frameworks | summary) ;;
    all) parts=(launch alloc frameworks); break ;;
    *) echo "--part $p: expected launch, alloc, frameworks, all or summary"; exit 2 ;;
  esac
done
if [ -n "$rounds" ] && ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "--rounds $rounds: not a number of rounds"
  exit 2
fi
((${#only[@]})) || only=(torch jax cupy cuda)
mkdir -p "$dir"

summary() {
  "$py" "$here/idle_cost.py" "$dir" --out-prefix "$OUT/idle-cost"
}
if [ "${parts[*]}" = summary ]; then
  summary
  exit $?
fi

command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
tree=$(cuslice_tree "$path") || exit 2
echo "cuslice: $tree ($(cuslice_version "$tree"))"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader

bench_part() {  # bench_part NAME [bench/run.sh mode]: bench/run.sh with --preemptible into $dir/NAME
  local name=$1 n
  shift
  n=${rounds:-$([ "$name" = launch ] && echo 8 || echo 6)}
  rm -rf "${dir:?}/$name"
  mkdir -p "$dir/$name"
  echo "== $name: bench/run.sh --preemptible $* $n"
  OUT=$dir/$name HOST_POOL=$host_pool bash "$root/bench/run.sh" --cuslice "$tree" --preemptible "$@" "$n"
}

frameworks_part() {
  local build=$root/build-gpu/gpu-tests arch=${CUDA_ARCH:-sm_90} work sock daemon r i order cfg
  mkdir -p "$build"
  echo "== frameworks: building tests/gpu/cuda_quota.cu"
  nvcc -O2 -std=c++17 -arch="$arch" -o "$build/cuda_quota" "$root/tests/gpu/cuda_quota.cu" &&
    nvcc -O2 -std=c++17 -arch="$arch" --default-stream per-thread -o "$build/cuda_quota_ptds" \
      "$root/tests/gpu/cuda_quota.cu" || { echo "nvcc failed"; return 2; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/cuslice-idle-cost.XXXXXX")
  sock=$work/cuslice.sock
  {
    echo "tenants:"
    echo "  - {name: solo, allow_env: true, memory: 20%}"
    echo "  - {name: serve, priority: high, allow_env: true, memory: 40%}"
    echo "  - {name: train, priority: low, allow_env: true, memory: 100%, preemptible: true${host_pool:+, host_pool: $host_pool}}"
  } >"$work/cuslice.yaml"
  "$tree/bin/cuslice" config check "$work/cuslice.yaml" || { rm -rf "$work"; return 2; }
  mkdir -p "$dir/frameworks"
  "$tree/bin/cuslice-scheduler" --config "$work/cuslice.yaml" --socket "$sock" --shm-name "/cuslice-idle-cost-$$" \
    --log-level info >>"$dir/frameworks/scheduler.log" 2>&1 &
  daemon=$!
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  if ! [ -S "$sock" ]; then
    echo "the scheduler did not start (see $dir/frameworks/scheduler.log)"
    kill "$daemon" 2>/dev/null
    rm -rf "$work" "$work-control"
    return 2
  fi
  local configs=(hooked scheduled preemptible)
  for r in $(seq 1 "${rounds:-1}"); do
    order=()
    for i in "${!configs[@]}"; do order+=("${configs[(i + r - 1) % ${#configs[@]}]}"); done
    for cfg in "${order[@]}"; do
      echo "== frameworks, round $r: $cfg"
      case $cfg in
        hooked) env -u CUSLICE_SOCKET -u CUSLICE_TENANT \
          "$py" "$root/tests/gpu/suite.py" --hook "$tree/lib/libcuslice.so" --bin "$build" \
          --out "$dir/frameworks/$cfg-r$r" --only "${only[@]}" ;;
        scheduled | preemptible)
          CUSLICE_SOCKET=$sock CUSLICE_TENANT=$([ "$cfg" = scheduled ] && echo solo || echo train) \
            "$py" "$root/tests/gpu/suite.py" --hook "$tree/lib/libcuslice.so" --bin "$build" \
            --out "$dir/frameworks/$cfg-r$r" --only "${only[@]}" ;;
      esac | grep -E '^\[(PASS|FAIL)\]|passed'
    done
  done
  kill "$daemon" 2>/dev/null
  wait "$daemon" 2>/dev/null
  rm -rf "$work" "$work-control"
}

rc=0
for p in "${parts[@]}"; do
  case $p in
    launch) bench_part launch --in-process ;;
    alloc) bench_part alloc ;;
    frameworks) frameworks_part ;;
    summary) true ;;
  esac
  r=$?
  if [ $r -ne 0 ]; then  # bench/run.sh and the frameworks' set-up fail only when they cannot run
    echo "!! part $p could not run (exit $r)"
    rc=2
  fi
done
summary
s=$?
[ $rc -eq 2 ] && exit 2
exit $s
