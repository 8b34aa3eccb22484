#!/usr/bin/env bash
# Graph captures beside a GEMM loop, natively and under cuslice (service priority high, GEMM
# loop low), alternating: bash tests/gpu/capture_stress.sh [ROUNDS] [CAPTURES]
# Needs a GPU and the bundle (scripts/gpu-bundle.sh, carried as .gpu-carry).
set -u
rounds=${1:-6}
captures=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$root/.gpu-carry
PY=${PYTHON:-python3}
sock=/tmp/cuslice-capture.sock
cat > /tmp/capture.yaml <<'YAML'
tenants:
  - {name: svc, priority: high}
  - {name: gemm, priority: low}
YAML
for r in $(seq "$rounds"); do
  echo "round $r native: $("$PY" "$root/tests/gpu/capture_stress.py" "$captures" 2>/tmp/native.err | tail -1)"
  "$B/bin/cuslice-scheduler" --config /tmp/capture.yaml --socket "$sock" --shm-name /cuslice-capture 2>/tmp/daemon.log &
  daemon=$!
  sleep 0.5
  echo "round $r cuslice: $(CUSLICE_SOCKET=$sock CUSLICE_TENANT=svc LD_PRELOAD=$B/lib/libcuslice.so \
      "$PY" "$root/tests/gpu/capture_stress.py" "$captures" 2>/tmp/cuslice.err | tail -1)"
  kill "$daemon"; wait "$daemon" 2>/dev/null
  grep -i "error" /tmp/cuslice.err | tail -2
done
