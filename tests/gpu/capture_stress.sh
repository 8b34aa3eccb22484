#!/usr/bin/env bash
# CUDA-graph captures of a ResNet-50 (capture_stress.py) beside a GEMM loop, natively and under
# cuslice (the capturing process in a high-priority tenant, the GEMM loop in a low-priority
# one), alternating:
#
#   bash tests/gpu/capture_stress.sh [--cuslice PATH] [ROUNDS] [CAPTURES]   # defaults 6 and 3
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh). Needs a GPU and PyTorch with torchvision. One line per round and
# mode: how many captures succeeded. Exit status 0 when every capture under cuslice
# succeeded, 1 otherwise, 2 when it cannot run.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
path=""
if [ "${1:-}" = --cuslice ]; then path=${2:?--cuslice needs a path}; shift 2; fi
rounds=${1:-6}
captures=${2:-3}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no NVIDIA GPU here"; exit 2; fi
B=$(cuslice_tree "$path") || exit 2
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, torchvision; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "SKIP: $PY has no CUDA torch with torchvision"; exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sock=$work/cuslice.sock
cat >"$work/capture.yaml" <<'YAML'
tenants:
  - {name: svc, allow_env: true, priority: high}
  - {name: gemm, allow_env: true, priority: low}
YAML
# ok_count JSON_LINE: the "ok" field of capture_stress.py's result line (0 if none).
ok_count() { "$PY" -c 'import json, sys; print(json.loads(sys.argv[1] or "{}").get("ok", 0))' "$1" 2>/dev/null || echo 0; }
total=0
passed=0
for r in $(seq "$rounds"); do
  line=$("$PY" "$root/tests/gpu/capture_stress.py" "$captures" 2>"$work/native.err" | tail -1)
  echo "round $r native: $(ok_count "$line")/$captures captures ($line)"
  "$B/bin/cuslice-scheduler" --config "$work/capture.yaml" --socket "$sock" --shm-name /cuslice-capture \
    2>"$work/daemon.log" &
  daemon=$!
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  line=$(CUSLICE_SOCKET=$sock CUSLICE_TENANT=svc LD_PRELOAD=$B/lib/libcuslice.so \
    "$PY" "$root/tests/gpu/capture_stress.py" "$captures" 2>"$work/cuslice.err" | tail -1)
  ok=$(ok_count "$line")
  echo "round $r cuslice: $ok/$captures captures ($line)"
  total=$((total + captures))
  passed=$((passed + ok))
  kill "$daemon"; wait "$daemon" 2>/dev/null
  grep -i "error" "$work/cuslice.err" | tail -2
done
echo "captures under cuslice: $passed/$total"
[ "$passed" = "$total" ]
