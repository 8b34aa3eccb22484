#!/usr/bin/env bash
# Tenants side by side on a real GPU: a cuslice-scheduler with GPU 0 spatial starts the MPS
# control daemon, two PyTorch jobs in spatial tenants join its server (the driver says they are
# MPS clients), compute a correct result with their SM limits, are held to their quotas (a
# tensor past it gets torch.OutOfMemoryError), both hold the token at once, and a time-sliced
# tenant beside them still runs; the control daemon is stopped with the scheduler.
#
#   bash tests/gpu/spatial.sh [--cuslice PATH]
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs a GPU, PyTorch and nvidia-cuda-mps-control. Changes no GPU
# setting. Exit status 0 when all hold, 1 otherwise, 2 when it cannot run.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
path=""
if [ "${1:-}" = --cuslice ]; then path=${2:?--cuslice needs a path}; fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
mps=$(command -v nvidia-cuda-mps-control) || { echo "SKIP: no nvidia-cuda-mps-control"; exit 2; }
tree=$(cuslice_tree "$path") || exit 2
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then echo "SKIP: $PY has no CUDA torch"; exit 2; fi
work=$(mktemp -d /tmp/cuslice-spatial.XXXXXX)
daemon=""
trap '[ -n "$daemon" ] && kill $daemon 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
failed=0
check() {  # check DESCRIPTION COMMAND...: PASS/FAIL line
  if "${@:2}"; then echo "PASS: $1"; else echo "FAIL: $1"; failed=1; fi
}
cat >"$work/cuslice.yaml" <<EOF
scheduler:
  spatial: {gpus: all, mps_control: $mps}
tenants:
  - {name: a, allow_env: true, priority: high, memory: 6GiB, compute: {sm: 50%}}
  - {name: b, allow_env: true, memory: 6GiB, compute: {sm: 25%}}
  - {name: t, allow_env: true, spatial: false, memory: 6GiB}
EOF
cat >"$work/job.py" <<'PY'
import ctypes, json, sys, time, torch
cuda = ctypes.CDLL("libcuda.so.1")
torch.cuda.init()
mps = ctypes.c_int(-1)
cuda.cuDeviceGetAttribute(ctypes.byref(mps), 133, 0)  # CU_DEVICE_ATTRIBUTE_MPS_ENABLED
a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
ok = torch.allclose((a @ b).cpu(), a.cpu() @ b.cpu(), rtol=1e-2, atol=1e-1)
try:
    x = torch.empty(7 << 30, dtype=torch.uint8, device="cuda")
    refused = False
except torch.OutOfMemoryError:
    refused = True
end, n = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    a @ b; n += 1
    if n % 20 == 0: torch.cuda.synchronize()
torch.cuda.synchronize()
print(json.dumps({"mps": mps.value, "correct": bool(ok), "refused_past_quota": refused, "gemms": n}), flush=True)
PY
"$tree/bin/cuslice-scheduler" --config "$work/cuslice.yaml" --socket "$work/cuslice.sock" \
  --shm-name "/cuslice-spatial-$$" >"$work/scheduler.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$work/cuslice.sock" ] && break; sleep 0.1; done
hooked() {  # hooked TENANT: the job's environment
  env LD_PRELOAD="$tree/lib/libcuslice.so" CUSLICE_SOCKET="$work/cuslice.sock" CUSLICE_TENANT="$1" "$PY" "$work/job.py" 12
}
hooked a >"$work/a.out" 2>"$work/a.err" &
ja=$!
hooked b >"$work/b.out" 2>"$work/b.err" &
jb=$!
hooked t >"$work/t.out" 2>"$work/t.err" &
jt=$!
both=0
for _ in $(seq 60); do
  sleep 0.25
  "$tree/bin/cuslice" status --socket "$work/cuslice.sock" --json >"$work/status.json" 2>/dev/null || continue
  if "$PY" - "$work/status.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["gpus"][0]
rows = {t["name"]: t for t in g["tenants"]}
sys.exit(0 if g["mode"] == "spatial" and rows.get("a", {}).get("holds_token") and rows.get("b", {}).get("holds_token") else 1)
PY
  then both=1; break; fi
done
"$tree/bin/cuslice" status --socket "$work/cuslice.sock" | sed 's/^/  status: /'
wait $ja $jb $jt
for j in a b t; do echo "$j: $(cat "$work/$j.out")"; done
field() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])" "$work/$1.out" "$2" 2>/dev/null; }
check "the spatial tenants' jobs are MPS clients" [ "$(field a mps)" = 1 -a "$(field b mps)" = 1 ]
check "the time-sliced tenant's job is not" [ "$(field t mps)" = 0 ]
check "every job computes the right product" [ "$(field a correct)$(field b correct)$(field t correct)" = TrueTrueTrue ]
check "a tensor past a spatial tenant's 6 GiB quota gets torch.OutOfMemoryError" [ "$(field a refused_past_quota)$(field b refused_past_quota)" = TrueTrue ]
check "both spatial tenants held the token at once" [ $both = 1 ]
check "the scheduler logged its MPS control daemon" grep -q "MPS control daemon .* serves" "$work/scheduler.log"
control=$(cat "$work/mps/nvidia-cuda-mps-control.pid" 2>/dev/null)
check "the control daemon wrote its pid beside the tenant socket" [ -n "$control" ]
check "no MPS server is reported as a process without the hook" bash -c "! grep -q 'in no tenant' '$work/scheduler.log'"
kill "$daemon"; wait "$daemon" 2>/dev/null; daemon=""
check "the control daemon stopped with the scheduler" bash -c "[ -n '$control' ] && ! kill -0 '$control' 2>/dev/null"
[ $failed = 0 ] || { echo "--- scheduler log"; cat "$work/scheduler.log"; for j in a b t; do echo "--- $j"; tail -5 "$work/$j.err"; done; }
exit $failed
