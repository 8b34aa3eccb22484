#!/usr/bin/env bash
# Hook overhead: bench/launch_alloc.cu run alternately with and without libcuslice.so.
#
#   bash bench/run.sh [--cuslice PATH [--preemptible]] [--launch-loop N | --in-process] [ROUNDS]   # on a machine with an NVIDIA GPU; ROUNDS 10
#
# Each round runs, in turn, the legacy-stream build in every configuration, then the per-thread
# default-stream build (--default-stream per-thread: the _ptsz entry points); the order of the
# configurations rotates from round to round. bench.md's paired ratio divides each run by the
# native run of its own round. Hooked = LD_PRELOAD=libcuslice.so
# CUSLICE_MEMORY_LIMIT=70GiB. Writes $OUT/bench.log (every run's lines) and $OUT/bench.md
# (the table: medians over rounds, min–max, hooked/native ratio).
#
# --cuslice PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). With it the hook comes from there, and two more configurations
# run under its scheduler: "scheduled" (the process in a tenant of its own, so every launch
# takes the token's fast path and the monitor tracks it) and "below" (the process in a
# low-priority tenant while an idle process of a high-priority tenant is registered: the
# bounded, parking launch path). Without it only the hook is built here (cmake, hook only,
# into build-gpu/) and only hooked and native run.
# --preemptible (after --cuslice): one more configuration, "preemptible": the process in
# `train`, a preemptible low-priority tenant (memory 100%, host_pool $HOST_POOL if set) beside
# `serve`, a high-priority tenant with a quota that never runs anything, so nothing is ever
# suspended: what being preemptible costs by itself. The other tenants then have quotas too
# (the configuration's rule with a preemptible tenant): solo 20%, hi and lo 10%, serve 40%.
# --launch-loop N: instead of launch_alloc, bench/launch_loop.cu (N null-kernel launches in a
# row, a synchronize every 20,000), and no "below" configuration: many short processes, for a
# paired ratio whose interval is narrow enough to tell a few percent (the launch rate varies by
# ±10-20% from process to process).
# --in-process: instead of launch_alloc, bench/launch_in_process.cu (blocks of launches through
# the hook alternating with blocks straight to the driver, in one process), and no "below"
# configuration: bench.md's second table gives the ratio of the two inside each run, which
# the process-to-process variation does not reach.
# Environment: CUDA_ARCH (default sm_90), OUT (default build-gpu/out), HOST_POOL (--preemptible).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/build-gpu
OUT=${OUT:-$build/out}
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
tree=""
if [ "${1:-}" = --cuslice ]; then
  . "$root/scripts/cuslice-tree.sh"
  tree=$(cuslice_tree "${2:?--cuslice needs a path}") || exit 2
  shift 2
fi
preemptible=""
if [ "${1:-}" = --preemptible ]; then
  [ -n "$tree" ] || { echo "--preemptible needs --cuslice PATH first"; exit 2; }
  preemptible=1
  shift
fi
loop=""
if [ "${1:-}" = --launch-loop ]; then
  loop=${2:?--launch-loop needs a number of launches}
  [[ $loop =~ ^[1-9][0-9]*$ ]] || { echo "--launch-loop $loop: not a number of launches"; exit 2; }
  shift 2
elif [ "${1:-}" = --in-process ]; then
  loop=in-process
  shift
fi
rounds=${1:-10}
mkdir -p "$OUT" "$build/bench"

if [ -n "$tree" ]; then
  hook=$tree/lib/libcuslice.so
else
  hook=$build/hook/libcuslice.so
  { cmake -S "$root" -B "$build" -G Ninja -DCUSLICE_HOOK_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
      && cmake --build "$build" --target cuslice; } >"$OUT/hook_build.log" 2>&1 \
    || { echo "hook build failed (see $OUT/hook_build.log)"; exit 1; }
fi

arch=${CUDA_ARCH:-sm_90}
if [ "$loop" = in-process ]; then
  binaries=(launch_in_process)
  nvcc -O2 -std=c++17 -arch="$arch" -o "$build/bench/launch_in_process" "$here/launch_in_process.cu" -lcuda \
    || { echo "nvcc failed"; exit 1; }
elif [ -n "$loop" ]; then
  binaries=(launch_loop)
  nvcc -O2 -std=c++17 -arch="$arch" -DLAUNCHES="$loop" -o "$build/bench/launch_loop" "$here/launch_loop.cu" \
    || { echo "nvcc failed"; exit 1; }
else
  binaries=(launch_alloc launch_alloc_ptds)
  nvcc -O2 -std=c++17 -arch="$arch" -o "$build/bench/launch_alloc" "$here/launch_alloc.cu" &&
  nvcc -O2 -std=c++17 -arch="$arch" --default-stream per-thread \
    -o "$build/bench/launch_alloc_ptds" "$here/launch_alloc.cu" || { echo "nvcc failed"; exit 1; }
fi

log=$OUT/bench.log
{
  echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); hook $hook; $rounds rounds"
} >"$log"
one() {  # one ROUND BINARY CONFIG
  local exe=$build/bench/$2
  echo "RUN $1 $2 $3" >>"$log"
  if [ "$3" = hooked ]; then
    LD_PRELOAD=$hook CUSLICE_MEMORY_LIMIT=70GiB "$exe" >>"$log" 2>&1
  elif [ "$3" = scheduled ] || [ "$3" = below ] || [ "$3" = preemptible ]; then
    scheduled "$exe" "$3" >>"$log" 2>&1
  else
    env -u LD_PRELOAD -u CUSLICE_MEMORY_LIMIT "$exe" >>"$log" 2>&1
  fi || echo "!! round $1 $2 $3 failed (rc $?)" | tee -a "$log"
}
sock=/tmp/cuslice-overhead/cuslice.sock  # its control socket: /tmp/cuslice-overhead-control
mkdir -p "$(dirname "$sock")"
if [ -n "$tree" ]; then
  cfg=$build/bench/overhead.yaml
  {
    echo "tenants:"
    echo "  - {name: solo, allow_env: true${preemptible:+, memory: 20%}}"
    echo "  - {name: hi, priority: high, allow_env: true${preemptible:+, memory: 10%}}"
    echo "  - {name: lo, priority: low, allow_env: true${preemptible:+, memory: 10%}}"
    if [ -n "$preemptible" ]; then
      echo "  - {name: serve, priority: high, allow_env: true, memory: 40%}"
      echo "  - {name: train, priority: low, allow_env: true, memory: 100%, preemptible: true${HOST_POOL:+, host_pool: $HOST_POOL}}"
    fi
  } >"$cfg"
  "$tree/bin/cuslice-scheduler" --config "$cfg" --socket "$sock" --shm-name /cuslice-overhead \
    >>"$OUT/scheduler.log" 2>&1 &
  daemon=$!
  trap 'kill $daemon ${idle_hi:-} 2>/dev/null' EXIT
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { echo "the scheduler did not start (see $OUT/scheduler.log)"; exit 1; }
fi
scheduled() {  # BINARY scheduled|below|preemptible: under the tree's scheduler
  local exe=$1 tenant=solo
  [ "$2" = preemptible ] && tenant=train
  if [ "$2" = below ]; then
    tenant=lo
    # An idle, registered process of the higher-priority tenant (cuInit registers it).
    LD_PRELOAD=$hook CUSLICE_SOCKET=$sock CUSLICE_TENANT=hi \
      python3 -c 'import ctypes, time; ctypes.CDLL(None).cuInit(0); time.sleep(3600)' &
    idle_hi=$!
    sleep 2
  fi
  LD_PRELOAD=$hook CUSLICE_SOCKET=$sock CUSLICE_TENANT=$tenant "$exe"
  local rc=$?
  if [ -n "${idle_hi:-}" ]; then kill "$idle_hi"; wait "$idle_hi" 2>/dev/null; idle_hi=; fi
  return $rc
}
configs=(hooked native)
[ -n "$tree" ] && configs+=(scheduled)
[ -n "$tree" ] && [ -z "$loop" ] && configs+=(below)
[ -n "$preemptible" ] && configs+=(preemptible)
for r in $(seq 1 "$rounds"); do
  # Each round starts one configuration later than the one before, so none always runs first
  # or right after the same one.
  order=""
  for i in "${!configs[@]}"; do order="$order ${configs[(i + r - 1) % ${#configs[@]}]}"; done
  for bin in "${binaries[@]}"; do
    for cfg in $order; do one "$r" "$bin" "$cfg"; done
  done
done
python3 "$here/summarize.py" "$log" "$OUT/bench.md"
