#!/usr/bin/env bash
# cuslice-dra-plugin on a real GPU: the DRA test kubelet (tests/dra_plugin/dra_kubelet.cpp)
# and the test API server (tests/dra_plugin/api_server.py) drive the plugin, which reads the
# real NVML, beside a real cuslice-scheduler. Checks the ResourceSlice (one device per GPU,
# its memory less the reserve, its UUID and name), a claim of 4 GiB and 30% of GPU 0 allocated
# as kube-scheduler would and prepared through the kubelet's DRA API, a PyTorch process started
# with what the claim's CDI spec gives a container (a process of the claim's tenant; CUDA sees
# 4 GiB; 3 GiB fit, 2 GiB more raise torch.OutOfMemoryError), and the tenant gone at
# NodeUnprepareResources:
#
#   bash tests/gpu/dra_plugin.sh --cuslice PATH [--dra-kubelet FILE] [--kubelet-libs DIR]
#   bash tests/gpu/dra_plugin.sh --fake [--cuslice BUILD]     # no GPU: on the fake driver
#   bash tests/gpu/dra_plugin.sh --bundle-kubelet DIR         # what to carry to the GPU machine
#
# PATH: the release tarball, an unpacked tarball or installation, or a build folder
# (scripts/cuslice-tree.sh); it must hold bin/cuslice-dra-plugin.
#
# The DRA test kubelet is not in the tarball (it is a test program): FILE is the binary
# (default $CUSLICE_DRA_KUBELET, else build/tests/dra_plugin/dra_kubelet of this checkout).
# It loads gRPC, protobuf and abseil of the machine it was built on (Debian 12's
# libgrpc++.so.1.51, libprotobuf.so.32, ...), which a GPU machine does not have and the tarball
# does not carry (it carries Debian 11's). `--bundle-kubelet DIR`, run where it was built,
# copies the binary to DIR/dra_kubelet and every library it loads but glibc, libstdc++ and
# libgcc_s to DIR/lib; carry DIR and pass `--dra-kubelet DIR/dra_kubelet` (or set
# CUSLICE_DRA_KUBELET): a lib/ beside the binary is used by itself, or name the folder with
# --kubelet-libs DIR (or CUSLICE_KUBELET_LIBS). The kubelet runs with that folder, then the
# tarball's lib/, as LD_LIBRARY_PATH. When it still cannot load a library, the check says which
# and exits 2.
#
# --fake runs the same steps without a GPU, on the fake CUDA driver and NVML of
# tests/fake_driver (--fake-driver DIR, default build/fake_driver) with a ctypes process in
# PyTorch's place and PATH defaulting to ./build, so that the check has run before it runs on
# a GPU machine.
#
# Needs python3 (the standard library; with the jsonschema module the slice is also checked
# against the resource.k8s.io/v1 schema, else a warning says it is not) and, on a GPU, PyTorch
# with CUDA. Logs and results go to $OUT/dra_plugin/ (default build-gpu/out/dra_plugin):
# dra_plugin.log, dra_plugin.json, dra_plugin.md, the logs of the scheduler, plugin, kubelet and
# process, the slice and the CDI spec (its credential left out). Exit status 0 when every check
# passes, 1 otherwise, 2 (SKIP) when it cannot run here.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/cuslice-tree.sh"
path=""
kubelet=${CUSLICE_DRA_KUBELET:-$root/build/tests/dra_plugin/dra_kubelet}
libs=${CUSLICE_KUBELET_LIBS:-}
fake=""
fake_driver=$root/build/fake_driver
bundle=""
while (($#)); do
  case $1 in
    --cuslice) path=${2:?--cuslice needs a path}; shift 2 ;;
    --dra-kubelet) kubelet=${2:?--dra-kubelet needs a file}; shift 2 ;;
    --kubelet-libs) libs=${2:?--kubelet-libs needs a folder}; shift 2 ;;
    --fake) fake=1; shift ;;
    --fake-driver) fake_driver=${2:?--fake-driver needs a folder}; shift 2 ;;
    --bundle-kubelet) bundle=${2:?--bundle-kubelet needs a folder}; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "usage: $0 [--cuslice PATH] [--dra-kubelet FILE] [--kubelet-libs DIR] [--fake [--fake-driver DIR]]" \
         "| --bundle-kubelet DIR" >&2; exit 2 ;;
  esac
done

# The libraries every Linux machine has, which the kubelet takes from the system.
system_lib='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'

if [ -n "$bundle" ]; then
  [ -x "$kubelet" ] || { echo "no DRA test kubelet at $kubelet (cmake --build build --target dra_kubelet)" >&2; exit 2; }
  mkdir -p "$bundle/lib" || exit 1
  cp -L "$kubelet" "$bundle/dra_kubelet" || exit 1
  if command -v strip >/dev/null; then strip "$bundle/dra_kubelet" || exit 1; fi  # its debug information: not needed there
  ldd "$kubelet" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name file; do
    [[ $name =~ $system_lib ]] || cp -L "$file" "$bundle/lib/$name" || exit 1
  done || exit 1
  if ldd "$kubelet" | grep -q 'not found'; then echo "the kubelet cannot load all its libraries here" >&2; exit 1; fi
  echo "$bundle: dra_kubelet and $(ls "$bundle/lib" | wc -l) libraries ($(du -sh "$bundle" | cut -f1));" \
    "on the GPU machine: --dra-kubelet $bundle/dra_kubelet"
  exit 0
fi

PY=${PYTHON:-python3}
if [ -n "$fake" ]; then
  [ -f "$fake_driver/libnvidia-ml.so.1" ] && [ -f "$fake_driver/libcuda.so.1" ] ||
    { echo "SKIP: no fake driver in $fake_driver (cmake --build build --target fake_cuda fake_nvml)"; exit 2; }
  fake_driver=$(cd "$fake_driver" && pwd)
  path=${path:-$root/build}
elif ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU here"; exit 2
fi
tree=$(cuslice_tree "$path") || exit 2
# A build folder's tree (cuslice-tree.sh) links the scheduler, the CLI, the hook and the device
# plugin; the DRA plugin is added here.
if [ ! -e "$tree/bin/cuslice-dra-plugin" ] && [ -d "$path" ] && [ -x "$path/dra_plugin/cuslice-dra-plugin" ]; then
  ln -s "$(cd "$path" && pwd)/dra_plugin/cuslice-dra-plugin" "$tree/bin/cuslice-dra-plugin"
fi
[ -x "$tree/bin/cuslice-dra-plugin" ] || { echo "SKIP: $tree has no bin/cuslice-dra-plugin"; exit 2; }
if ldd "$tree/bin/cuslice-dra-plugin" 2>/dev/null | grep -q 'not found'; then
  echo "SKIP: $tree/bin/cuslice-dra-plugin cannot load its libraries here (use the release tarball):"
  ldd "$tree/bin/cuslice-dra-plugin" | grep 'not found'
  exit 2
fi

[ -x "$kubelet" ] || {
  echo "SKIP: no DRA test kubelet at $kubelet: build it (cmake --build build --target dra_kubelet), bundle it" \
    "(bash tests/gpu/dra_plugin.sh --bundle-kubelet DIR) and pass --dra-kubelet DIR/dra_kubelet"
  exit 2
}
kubelet=$(cd "$(dirname "$kubelet")" && pwd)/$(basename "$kubelet")
if [ -z "$libs" ] && [ -d "$(dirname "$kubelet")/lib" ]; then libs=$(dirname "$kubelet")/lib; fi
[ -z "$libs" ] || libs=$(cd "$libs" && pwd) || exit 2
missing=$(LD_LIBRARY_PATH="${libs:+$libs:}$tree/lib" ldd "$kubelet" 2>&1 | grep 'not found')
if [ -n "$missing" ]; then
  echo "SKIP: the DRA test kubelet $kubelet cannot load these libraries here:"
  echo "$missing"
  echo "bundle it where it was built (bash tests/gpu/dra_plugin.sh --bundle-kubelet DIR), carry DIR, and pass" \
    "--dra-kubelet DIR/dra_kubelet (or --kubelet-libs with the folder of its libraries)"
  exit 2
fi

if [ -z "$fake" ] && ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "SKIP: $PY has no CUDA torch"; exit 2
fi
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT/dra_plugin"
echo "cuslice: $tree ($(cuslice_version "$tree")); DRA test kubelet: $kubelet${libs:+ (libraries: $libs)}"
exec "$PY" "$root/tests/gpu/dra_plugin.py" --tree "$tree" --dra-kubelet "$kubelet" --kubelet-libs "$libs" \
  --out "$OUT/dra_plugin" ${fake:+--fake "$fake_driver"}
