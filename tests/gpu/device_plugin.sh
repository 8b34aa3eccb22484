#!/usr/bin/env bash
# cuslice-device-plugin on a real GPU: the fake kubelet (tests/device_plugin/fake_kubelet.cpp)
# drives the plugin, which reads the real NVML, beside a real cuslice-scheduler. Checks the
# capacity advertised for each card, an allocation, and a PyTorch process started the way the
# container runtime would start it from the Allocate answer (its environment; its mounts as
# the host paths they name), held to the quota, and the tenant gone with the pod; on several
# GPUs, one 60% pod per GPU placed on a GPU each; a scheduler restart under a running process:
#
#   bash tests/gpu/device_plugin.sh [--cuslice PATH] [--fake-kubelet FILE]
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh); it must hold bin/cuslice-device-plugin. FILE: the fake kubelet
# (default build/tests/device_plugin/fake_kubelet of this checkout), which loads gRPC and
# protobuf from PATH's lib/ when the tarball carries them. Logs and a table of the checks go
# to $OUT (default build-gpu/out): device_plugin.log, device_plugin.md. Exit status 0 when every
# check passes, 1 otherwise, 2 (SKIP) when it cannot run here.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
path=""
kubelet=$root/build/tests/device_plugin/fake_kubelet
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --fake-kubelet) kubelet=${2:?--fake-kubelet needs a file}; shift 2 ;;
    *) echo "usage: $0 [--cuslice PATH] [--fake-kubelet FILE]" >&2; exit 2 ;;
  esac
done
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
tree=$(cuslice_tree "$path") || exit 2
[ -x "$tree/bin/cuslice-device-plugin" ] || { echo "SKIP: $tree has no bin/cuslice-device-plugin"; exit 2; }
[ -x "$kubelet" ] || { echo "SKIP: no fake kubelet at $kubelet (build it: cmake --build build --target fake_kubelet)"; exit 2; }
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then echo "SKIP: $PY has no CUDA torch"; exit 2; fi
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT"
exec "$PY" "$root/tests/gpu/device_plugin.py" --tree "$tree" --fake-kubelet "$kubelet" --out "$OUT"
