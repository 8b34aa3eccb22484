#!/usr/bin/env bash
# GPU time sharing under cuslice against native time-slicing (issue 3): shares, limit,
# efficiency, priority (ResNet-50 service beside a trainer or a GEMM loop), handoff latency,
# scheduler CPU, 64 clients. Every scenario runs natively (no hook, no daemon) and under
# cuslice (cuslice-scheduler + LD_PRELOAD=libcuslice.so), alternately, in one call.
#
#   bash bench/run_compute.sh [--only GROUP[,GROUP]] [--native-only] [--quick] [--reps N] ...
#       [--modes native,cuslice,mps,mps-cuslice]   (mps*: under a private MPS daemon)
#       groups: shares efficiency limit priority adversarial handoff handoff2 cpu many
#       (python3 bench/compute/harness.py --help for every option)
#
# cuslice mode needs the bundle built by scripts/gpu-bundle.sh (default .gpu-carry, or
# --bundle DIR): with the device tool, run(command="bash bench/run_compute.sh",
# carry=[".gpu-carry"]). Writes $OUT/compute.md (the table), $OUT/compute.json (raw results),
# $OUT/compute.log (every process's output); OUT defaults to build-gpu/out. Default durations
# take about 7-8 minutes for both modes; --native-only about 4; --quick about half.
# Environment: PYTHON (default python3); CUSLICE_LOG_LEVEL, CUSLICE_MAX_QUEUED and
# CUSLICE_PREEMPT_QUEUED are passed to the hooked workers.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT"
py=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  if [[ " $* " != *" --fake "* ]]; then echo "no NVIDIA GPU here"; exit 2; fi
fi
native_only=0
for a in "$@"; do [ "$a" = --native-only ] && native_only=1; done
bundle=$root/.gpu-carry
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = --bundle ] && bundle=${args[$((i + 1))]:-}
  # --modes without a hooked mode needs no bundle.
  [ "${args[$i]}" = --modes ] && [[ "${args[$((i + 1))]:-}" != *cuslice* ]] && native_only=1
done
if [ "$native_only" = 0 ]; then
  if [ ! -x "$bundle/bin/cuslice-scheduler" ]; then
    echo "no bundle at $bundle: run 'bash scripts/gpu-bundle.sh' here and carry .gpu-carry (or use --native-only)"
    exit 2
  fi
  # The bundle's libraries must all resolve here (a library missing from the bundle shows now).
  if ldd "$bundle/bin/cuslice-scheduler" | grep -q "not found"; then
    ldd "$bundle/bin/cuslice-scheduler"; echo "the bundle's daemon cannot load its libraries here"; exit 2
  fi
  head -1 "$bundle/BUNDLE_INFO" 2>/dev/null | sed 's/^/bundle /'
fi
exec "$py" "$here/compute/harness.py" --out "$OUT" "$@"
