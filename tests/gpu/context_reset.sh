#!/usr/bin/env bash
# cudaDeviceReset below a higher-priority tenant, on a real GPU: context_reset.cu runs in a
# low-priority tenant while an idle process of a high-priority tenant is registered, resets its
# device between phases and at the end, and exits. It must finish with status 0, every kernel
# run. Odd runs keep the scheduler's default time slice (the process's channel groups are
# shortened, freed by the reset and learnt again, and its launches go on without the token);
# even runs set `lower_priority_timeslice: off`, so its launches take the parking path, whose
# gate words are pinned host memory that the reset takes away.
#
#   bash tests/gpu/context_reset.sh [--cuslice PATH ...] [--runs N] [--phases P]
#       PATH: the release tarball, an unpacked tarball or installation, or a build folder
#       (scripts/cuslice-tree.sh); several to compare versions (default: the cuslice-scheduler
#       on PATH, else ./build). N runs each (default 1), of P phases (default 3).
#
# Each version's scheduler and hook run it in turn; one line per run: the version, the exit
# status (124: hung, killed after 30 s; the state of its threads is printed), and the hook's
# exit counters. Exit status: 0 when every run passed, 2 when it cannot run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/cuslice-tree.sh"
OUT=${OUT:-/tmp/context-reset}
mkdir -p "$OUT"
runs=1
phases=3
paths=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --cuslice) paths+=("${2:?--cuslice needs a path}"); shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
((${#paths[@]})) || paths=("")
trees=()
for p in "${paths[@]}"; do trees+=("$(cuslice_tree "$p")") || exit 2; done
build=$(mktemp -d)
nvcc -O2 -arch="${CUDA_ARCH:-sm_90}" -o "$build/context_reset" "$here/context_reset.cu" || { echo "nvcc failed"; exit 1; }
status=0
for t in "${!trees[@]}"; do for run in $(seq "$runs"); do
  tree=${trees[$t]}
  sock=$build/cuslice.sock
  cfg=$build/reset.yaml
  slice=default
  (( run % 2 )) || slice=off
  { [ "$slice" = off ] && printf 'scheduler: {lower_priority_timeslice: off}\n'
    printf 'tenants:\n  - {name: hi, allow_env: true, priority: high}\n  - {name: lo, allow_env: true, priority: low}\n'; } >"$cfg"
  "$tree/bin/cuslice-scheduler" --config "$cfg" --socket "$sock" --shm-name /cuslice-reset-test \
    >>"$OUT/scheduler.log" 2>&1 &
  daemon=$!
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  LD_PRELOAD=$tree/lib/libcuslice.so CUSLICE_SOCKET=$sock CUSLICE_TENANT=hi \
    python3 -c 'import ctypes, time; ctypes.CDLL(None).cuInit(0); time.sleep(3600)' &
  idle_hi=$!
  sleep 2
  log=$OUT/cuslice$t-$run.log
  LD_PRELOAD=$tree/lib/libcuslice.so CUSLICE_SOCKET=$sock CUSLICE_TENANT=lo CUSLICE_LOG_LEVEL=debug \
    "$build/context_reset" "$phases" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "hung; its threads:"
    for t in /proc/$pid/task/*; do echo "  $(cat "$t/comm") wchan=$(cat "$t/wchan") syscall=$(cut -d' ' -f1 "$t/syscall")"; done
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    rc=124
  else
    wait "$pid"
    rc=$?
  fi
  kill "$idle_hi" "$daemon" 2>/dev/null
  wait "$idle_hi" "$daemon" 2>/dev/null
  rm -f "$sock"
  counts=$(grep -o 'launches held back [0-9]*, gates [0-9]*.*' "$log" | tail -1)
  echo "$(cuslice_version "$tree") run $run (time slice: $slice): exit $rc; $(grep -c '^phase .* ran' "$log") phases ran; ${counts:-no exit counters}; $(grep -c 'without the token' "$log") times without the token"
  [ "$rc" -eq 0 ] && grep -q '^ok$' "$log" || status=1
done; done
rm -rf "$build"
exit $status
