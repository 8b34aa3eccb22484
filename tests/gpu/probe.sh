#!/usr/bin/env bash
# Native probe (no hook): the driver facts docs/evidence/probes/driver.md records.
#
#   bash tests/gpu/probe.sh        # on the GPU machine; logs to $OUT (default /tmp/cuslice-probe)
#
# $OUT/probe.txt  everything the probe printed
# $OUT/doors.txt  door_probe's full reports (every cu*/nvml* lookup, per framework)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/cuslice-probe}
mkdir -p "$OUT"
cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
work=$(mktemp -d)
doors=$OUT/doors.txt
: >"$doors"

door_run() {  # door_run LABEL CMD...: run CMD under door_probe, append its report to doors.txt
  local label=$1; shift
  echo "#### RUN $label: $*" >>"$doors"
  local tmp=$work/door.$label
  DOOR_PROBE_OUT=$tmp LD_PRELOAD=$work/door_probe.so "$@" >/dev/null 2>"$work/err.$label"
  local rc=$?
  cat "$tmp" >>"$doors" 2>/dev/null
  echo "== door summary: $label (rc=$rc)"
  grep -E '^(S |O |==== )' "$tmp" 2>/dev/null | grep -v '^S O '
  [ $rc -eq 0 ] || tail -3 "$work/err.$label"
}

{
  echo "### probe on $(hostname), $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  nvcc --version | tail -1
  python3 -c "import torch, jax, cupy; print('torch', torch.__version__, 'jax', jax.__version__, 'cupy', cupy.__version__)"

  nvcc -O2 -std=c++17 -arch=sm_90 -o "$work/probe" "$here/probe.cu" \
    -L"$cuda/lib64/stubs" -lcuda -ldl || exit 1
  gcc -O2 -shared -fPIC -o "$work/door_probe.so" "$here/door_probe.c" -ldl || exit 1
  echo "door_probe dlsym forwards with a tail jump: $(objdump -d --no-show-raw-insn "$work/door_probe.so" \
    | awk '/<dlsym>:/,/^$/' | grep -c 'jmp  *\*.*real_dlsym')"

  stub=$cuda/lib64/stubs/libcuda.so
  nm -D --defined-only "$stub" | awk '{print $3}' | grep '^cu' >"$work/exports.txt"
  echo "stub exports: $(wc -l <"$work/exports.txt")"

  echo; echo "########## 1. cuGetProcAddress vs dlsym"
  "$work/probe" symbols "$work/exports.txt"
  echo; echo "########## 2-5. memory"
  "$work/probe" memory
  echo; echo "########## 2b. frameworks' own overhead"
  for fw in torch jax jax-prealloc cupy; do
    timeout 120 python3 "$here/probe_frameworks.py" "$fw" 2>&1 | grep -v -i warning
  done

  echo; echo "########## 6. doors"
  door_run torch-default python3 -c "import torch; a=torch.randn(512,512,device='cuda'); print((a@a).sum().item())"
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True door_run torch-expandable \
    python3 -c "import torch; a=torch.randn(512,512,device='cuda'); print((a@a).sum().item())"
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync door_run torch-mallocasync \
    python3 -c "import torch; a=torch.randn(512,512,device='cuda'); print((a@a).sum().item())"
  door_run jax python3 -c "import jax.numpy as jnp; jnp.ones(1).block_until_ready()"
  door_run cupy python3 -c "import cupy; cupy.ones(1); x=cupy.ones((64,64)); float((x@x).sum())"
  door_run nvidia-smi-query nvidia-smi --query-gpu=memory.total --format=csv
  door_run nvidia-smi-plain nvidia-smi
  door_run static-cudart "$work/probe" runtime
  echo "### probe done"
} 2>&1 | tee "$OUT/probe.txt"
