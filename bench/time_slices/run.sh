#!/usr/bin/env bash
# Preemption inside kernels by the GPU's time slices (docs/evidence/benchmarks.md, "Time slices"):
#   1. the probe: a `high` tenant's tiny kernel every 10 ms beside a `low` tenant's
#      back-to-back 5 ms spin kernels; its launch-to-completion p50/p90/p99/max, and the
#      spinner's share of the GPU;
#   2. with torch: two GEMM loops, one in each tenant; what the `high` one keeps of its speed
#      alone (the lower tenant's time slices let it in between the higher one's).
# Each round runs native (both processes without the hook), then cuslice with
# `lower_priority_timeslice` off, 200us and 100us (the GEMM loops: off and 200us), each under a
# cuslice-scheduler of its own with tenants hi (priority: high) and lo (priority: low).
#
#   bash bench/time_slices/run.sh --cuslice PATH [ROUNDS]     # ROUNDS 2; 2 minutes a round on an H100
#
# --cuslice PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs nvcc (CUDA_ARCH, default sm_90). Writes $OUT/time_slices.log
# (every run's lines, with the spinner's debug log line on its slices) and prints it; OUT
# defaults to build-gpu/out. Exits 2 where there is no GPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-$root/build-gpu/out}
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
[ "${1:-}" = --cuslice ] || { echo "usage: run.sh --cuslice PATH [ROUNDS]"; exit 2; }
tree=$(cuslice_tree "${2:?--cuslice needs a path}") || exit 2
rounds=${3:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/cuslice-time-slices.XXXXXX")
daemon=""
trap 'kill $daemon 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$OUT"
log=$OUT/time_slices.log
probe=$work/probe
nvcc -O2 -std=c++17 -arch="${CUDA_ARCH:-sm_90}" -o "$probe" "$here/probe.cu" || { echo "nvcc failed"; exit 1; }
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(cuslice_version "$tree"); $rounds rounds" | tee "$log"

# Starts a scheduler whose lower_priority_timeslice is $1, on a socket of its own.
start_scheduler() {
  local d=$work/$1
  mkdir -p "$d"
  printf 'scheduler: {lower_priority_timeslice: %s}\ntenants:\n  - {name: hi, priority: high}\n  - {name: lo, priority: low}\n' \
    "$1" >"$d/cuslice.yaml"
  "$tree/bin/cuslice-scheduler" --config "$d/cuslice.yaml" --socket "$d/cuslice.sock" --shm-name "/cuslice-ts-$$-$1" \
    >"$d/scheduler.log" 2>&1 &
  daemon=$!
  for _ in $(seq 50); do [ -S "$d/cuslice.sock" ] && return 0; sleep 0.1; done
  echo "the scheduler did not start:"; cat "$d/scheduler.log"; exit 1
}
stop_scheduler() { kill "$daemon"; wait "$daemon" 2>/dev/null; daemon=""; }

# pair CONFIG LOW_COMMAND... -- HIGH_COMMAND...: the low one, then 4 s later the high one
# (CONFIG native: no hook; else the setting, under a scheduler of its own).
pair() {
  local cfg=$1; shift
  local low=() high=()
  while [ "$1" != -- ]; do low+=("$1"); shift; done
  shift; high=("$@")
  local lo_env=(env -u LD_PRELOAD) hi_env=(env -u LD_PRELOAD)
  if [ "$cfg" != native ]; then
    start_scheduler "$cfg"
    lo_env=(env LD_PRELOAD="$tree/lib/libcuslice.so" CUSLICE_SOCKET="$work/$cfg/cuslice.sock" CUSLICE_TENANT=lo
            CUSLICE_LOG_LEVEL=debug)
    hi_env=(env LD_PRELOAD="$tree/lib/libcuslice.so" CUSLICE_SOCKET="$work/$cfg/cuslice.sock" CUSLICE_TENANT=hi)
  fi
  "${lo_env[@]}" "${low[@]}" >"$work/low.out" 2>"$work/low.err" &
  local lo=$!
  sleep "${LEAD_S:-1.5}"
  "${hi_env[@]}" "${high[@]}" >"$work/high.out" 2>&1
  wait "$lo"
  [ "$cfg" != native ] && stop_scheduler
  echo "$cfg | high: $(tail -n 1 "$work/high.out") | low: $(tail -n 1 "$work/low.out") | $(grep -m 1 'time slice\|without the token' "$work/low.err")" | tee -a "$log"
}

echo "== the probe beside 5 ms spin kernels" | tee -a "$log"
echo "alone | $("$probe" tick 3)" | tee -a "$log"
for r in $(seq 1 "$rounds"); do
  for cfg in native off 200us 100us; do pair "$cfg" "$probe" spin 5 7 -- "$probe" tick 4; done
done
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== a high-priority GEMM loop beside a low-priority one" | tee -a "$log"
  echo "alone | $(python3 "$here/gemm_loop.py" 6)" | tee -a "$log"
  for r in $(seq 1 "$rounds"); do
    for cfg in native 200us off; do LEAD_S=4 pair "$cfg" python3 "$here/gemm_loop.py" 20 -- python3 "$here/gemm_loop.py" 6; done
  done
fi
