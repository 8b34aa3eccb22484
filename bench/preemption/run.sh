#!/usr/bin/env bash
# Memory preemption on an NVIDIA GPU (driver 550 or later): a preemptible ResNet-50 trainer
# holding most of the card, a high-priority service that needs most of it; the service's wait,
# the trainer's resumption, and suspend/resume GB/s against the driver's checkpoint API called
# directly (bench/preemption/run.py says what is measured and checked).
#
#   bash scripts/gpu-bundle.sh                # on the build machine: .gpu-carry
#   bash bench/preemption/run.sh [--bundle DIR] [run.py options]
#
# Needs python3 with torch and torchvision, and gcc with the CUDA toolkit's headers
# (CUDA_HOME, default /usr/local/cuda). Writes OUT/preemption.md, OUT/preemption.json and
# OUT/preemption-logs/; OUT defaults to build-gpu/out. Takes about 5 minutes on an H100.
# Exits 0 when every check passed, 1 when one failed; prints SKIP and exits 0 without a GPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT" "$root/build-gpu/preemption"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU here"
  exit 0
fi
bundle=$root/.gpu-carry
args=()
while (($#)); do
  case $1 in
    --bundle) bundle=${2:?--bundle needs a folder}; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ ! -x "$bundle/bin/cuslice-scheduler" ] || [ ! -f "$bundle/lib/libcuslice.so" ]; then
  echo "no bundle at $bundle: build it with 'bash scripts/gpu-bundle.sh' and bring it here"
  exit 2
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
raw=$root/build-gpu/preemption/raw_checkpoint
gcc -O2 -I"$cuda/include" -o "$raw" "$here/raw_checkpoint.c" -ldl || { echo "cannot build raw_checkpoint"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
exec "${PYTHON:-python3}" "$here/run.py" --bundle "$bundle" --raw "$raw" --out "$OUT" "${args[@]}"
