#!/usr/bin/env bash
# The lower tenant's GPU time slices on a real driver: a process of back-to-back 5 ms spin
# kernels in a low-priority tenant, and a probe (a tiny kernel every 10 ms) in a high-priority
# one, under a cuslice-scheduler with the default lower_priority_timeslice (200us). Checks that
#   - the spinner's hook shortened every channel group it learnt, with no control refused, and
#     read them back short: its launches went on without the token;
#   - the probe's p99 stayed under 1 ms (it waits for the slice, not for the 5 ms kernel; the
#     driver's own 2 ms slice gives about 1.8 ms);
#   - once the probe exited, the driver's slices came back and launches waited for the token.
#
#   bash tests/gpu/time_slices.sh --cuslice PATH
#       PATH: the release tarball, an unpacked tarball or installation, or a build folder
#       (scripts/cuslice-tree.sh).
#
# Needs nvcc (CUDA_ARCH, default sm_90). Exit status: 0 passed, 1 failed, 2 cannot run here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-/tmp/time-slices}
mkdir -p "$OUT"
[ "${1:-}" = --cuslice ] || { echo "usage: time_slices.sh --cuslice PATH"; exit 2; }
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
tree=$(cuslice_tree "${2:?--cuslice needs a path}") || exit 2
work=$(mktemp -d)
daemon=""
trap 'kill $daemon 2>/dev/null; rm -rf "$work"' EXIT
nvcc -O2 -std=c++17 -arch="${CUDA_ARCH:-sm_90}" -o "$work/probe" "$root/bench/time_slices/probe.cu" \
  || { echo "nvcc failed"; exit 1; }
printf 'tenants:\n  - {name: hi, allow_env: true, priority: high}\n  - {name: lo, allow_env: true, priority: low}\n' >"$work/cuslice.yaml"
"$tree/bin/cuslice-scheduler" --config "$work/cuslice.yaml" --socket "$work/cuslice.sock" \
  --shm-name "/cuslice-time-slices-$$" >"$OUT/scheduler.log" 2>&1 &
daemon=$!
for _ in $(seq 50); do [ -S "$work/cuslice.sock" ] && break; sleep 0.1; done
[ -S "$work/cuslice.sock" ] || { echo "the scheduler did not start"; cat "$OUT/scheduler.log"; exit 1; }
hooked=(env LD_PRELOAD="$tree/lib/libcuslice.so" CUSLICE_SOCKET="$work/cuslice.sock")
"${hooked[@]}" CUSLICE_TENANT=lo CUSLICE_LOG_LEVEL=debug "$work/probe" spin 5 9 >"$OUT/spin.out" 2>"$OUT/spin.err" &
spin=$!
sleep 1.5
"${hooked[@]}" CUSLICE_TENANT=hi "$work/probe" tick 4 >"$OUT/tick.out" 2>&1
wait "$spin"
status=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "PASS: $1"; else echo "FAIL: $1"; status=1; fi
}
tick=$(tail -n 1 "$OUT/tick.out")
p99=$(sed -n 's/.* p99 \([0-9]*\) us.*/\1/p' <<<"$tick")
echo "probe: $tick"
echo "spinner: $(tail -n 1 "$OUT/spin.out")"
grep -E 'time slice|token' "$OUT/spin.err"
shortened=$(sed -n 's/.*shortened below a higher-priority tenant: \([0-9]*\) of \([0-9]*\) channel groups shortened, \([0-9]*\) controls refused.*/\1 \2 \3/p' "$OUT/spin.err" | head -n 1)
read -r short groups refused <<<"${shortened:-0 0 0}"
check "every channel group shortened ($short of $groups, $refused refused)" test "$groups" -gt 0 -a "$short" = "$groups" -a "$refused" = 0
check "launches went on without the token" grep -q 'without the token: the GPU preempts them within the short slice' "$OUT/spin.err"
check "probe p99 ${p99:-?} us under 1000 us" test "${p99:-999999}" -lt 1000
check "the driver's slices came back after the probe" grep -q "GPU time slice the driver's" "$OUT/spin.err"
check "launches waited for the token again" grep -q 'launches wait for the token again' "$OUT/spin.err"
exit $status
