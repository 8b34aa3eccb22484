#!/usr/bin/env bash
# GPU time sharing under cuslice against native time-slicing: shares, limit, efficiency,
# priority (ResNet-50 service beside a trainer or a GEMM loop), handoff latency, scheduler
# CPU, 64 clients. Every scenario runs natively (no hook, no daemon) and under cuslice
# (cuslice-scheduler + LD_PRELOAD=libcuslice.so), alternately, in one call.
#
#   bash bench/run_compute.sh --cuslice PATH [--only GROUP[,GROUP]] [--quick] [--reps N] ...
#   bash bench/run_compute.sh --native-only ...
#       [--modes native,cuslice,mps,mps-cuslice]   (mps*: under a private MPS daemon)
#       groups: shares efficiency limit priority adversarial handoff handoff2 cpu many
#       (python3 bench/compute/harness.py --help for every option)
#
# --cuslice PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh; without it, the cuslice-scheduler on PATH or ./build). Writes
# $OUT/compute.md (the table), $OUT/compute.json (raw results), $OUT/compute.log (every
# process's output); OUT defaults to build-gpu/out. Default durations take about 8 minutes
# for both modes; --native-only about 4; --quick about half.
# Environment: PYTHON (default python3); CUSLICE_LOG_LEVEL, CUSLICE_MAX_QUEUED,
# CUSLICE_PREEMPT_QUEUED and CUSLICE_PARK_QUEUED are passed to the hooked workers.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT"
py=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  if [[ " $* " != *" --fake "* ]]; then echo "no NVIDIA GPU here"; exit 2; fi
fi
hooked=1
path=""
args=()
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --native-only) hooked=0; args+=("$1"); shift ;;
    --modes) [[ ${2:-} == *cuslice* ]] || hooked=0; args+=("$1" "${2:-}"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ "$hooked" = 1 ]; then
  tree=$(cuslice_tree "$path") || exit 2
  echo "cuslice: $tree ($(cuslice_version "$tree"))"
  args+=(--cuslice "$tree")
fi
exec "$py" "$here/compute/harness.py" --out "$OUT" "${args[@]}"
