#!/usr/bin/env bash
# Multi-GPU benchmark (bench/multi_gpu/run.py): shares per GPU, a tenant on two GPUs, and
# torchrun DDP with NCCL under a quota, natively and under cuslice, alternately, in one call.
#
#   bash bench/multi_gpu/run.sh --cuslice PATH [run.py's options: --only, --reps, --duration]
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs two GPUs or more, PyTorch with NCCL. Writes
# $OUT/multi_gpu.md, multi_gpu.json, multi_gpu.log (OUT defaults to build-gpu/out). Default
# durations take about 7 minutes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT"
path=""
args=()
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here"; exit 2; }
tree=$(cuslice_tree "$path") || exit 2
echo "cuslice: $tree ($(cuslice_version "$tree"))"
exec "${PYTHON:-python3}" "$here/run.py" --cuslice "$tree" --out "$OUT" "${args[@]}"
