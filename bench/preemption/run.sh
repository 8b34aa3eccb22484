#!/usr/bin/env bash
# Memory preemption on an NVIDIA GPU (driver 550 or later): a preemptible ResNet-50 trainer
# holding most of the card, a high-priority service that needs most of it; the service's wait,
# the trainer's resumption, and suspend/resume GB/s against the driver's checkpoint API called
# directly (bench/preemption/run.py says what is measured and checked).
#
#   bash bench/preemption/run.sh --cuslice PATH [run.py options]
#   bash bench/preemption/run.sh --cuslice PATH --scenario fast [fast.py options]
#   bash bench/preemption/run.sh --cuslice PATH --scenario fast --quick     # a first smoke run
#   bash bench/preemption/run.sh --cuslice PATH --scenario fast --checkpoint  # and fast: false beside it
#
# --scenario fast: the fast path instead (bench/preemption/fast.py says what is measured and
# checked): a preemptible trainer of 1 GiB tensors held while only what a high-priority service
# needs is copied to pinned host memory; the time to room, the bytes moved against what had to,
# the resumption, the trainer's throughput and every tensor's content. Writes
# $OUT/preemption-fast.md, $OUT/preemption-fast.json and $OUT/preemption-fast-logs/; needs
# python3 with torch only; should take about 2 minutes on an H200 (1 with --quick, 4 with
# --checkpoint).
#
# --cuslice PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs python3 with torch and torchvision, and gcc with the CUDA
# toolkit's headers (CUDA_HOME, default /usr/local/cuda). Writes $OUT/preemption.md,
# $OUT/preemption.json and $OUT/preemption-logs/; OUT defaults to build-gpu/out. Takes about
# 5 minutes on an H100. Exits 0 when every check passed, 1 when one failed, 2 when it could
# not run (no GPU among them).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT" "$root/build-gpu/preemption"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no NVIDIA GPU here"
  exit 2
fi
path=""
scenario=checkpoint
args=()
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --scenario) scenario=${2:?--scenario needs checkpoint or fast}; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
case $scenario in
  checkpoint | fast) ;;
  *) echo "--scenario $scenario: expected checkpoint (the default) or fast"; exit 2 ;;
esac
tree=$(cuslice_tree "$path") || exit 2
echo "cuslice: $tree ($(cuslice_version "$tree"))"
if [ "$scenario" = fast ]; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
  exec "${PYTHON:-python3}" "$here/fast.py" --cuslice "$tree" --out "$OUT" "${args[@]}"
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
raw=$root/build-gpu/preemption/raw_checkpoint
gcc -O2 -I"$cuda/include" -o "$raw" "$here/raw_checkpoint.c" -ldl || { echo "cannot build raw_checkpoint"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
exec "${PYTHON:-python3}" "$here/run.py" --cuslice "$tree" --raw "$raw" --out "$OUT" "${args[@]}"
