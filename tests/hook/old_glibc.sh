#!/usr/bin/env bash
# The hook's tests on an older glibc than it was built with: libcuslice.so as built here (Debian
# 12, glibc 2.36), preloaded into the fake driver and the hook's tests as Debian 11 (glibc 2.31)
# builds them, in the root of scripts/debian11-root.sh. The hook's baseline is glibc 2.28
# (hook/base/glibc_baseline.h); ctest's hook.glibc_baseline checks its symbol versions, this checks
# that it loads and works there. The tests that start a scheduler start this build's, run by
# the loader and libraries it runs with here: a daemon on a newer host serving a container with
# an older glibc.
#
#   bash tests/hook/old_glibc.sh [BUILD]     BUILD: the build folder (default build)
#
# The tests are built in the root's /build-hook-tests. Exit status 77: it cannot run here (not
# root, chroot or mount not permitted), skipped rather than passed. .ci/hardened runs it (stage
# old-glibc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/debian11-root.sh"

case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
esac
build=${1:-build}
die() {
  echo "old-glibc: $*" >&2
  exit 1
}

hook=$(realpath "$build/hook/libcuslice.so" 2>/dev/null) || die "no $build/hook/libcuslice.so: build first"
scheduler=$(realpath "$build/scheduler/cuslice-scheduler" 2>/dev/null) || die "no $build/scheduler/cuslice-scheduler"
cuda_root=$(sed -n 's/^CUSLICE_CUDA_ROOT:PATH=//p' "$build/CMakeCache.txt")
[ -f "$cuda_root/include/cuda.h" ] || die "no cuda.h under '$cuda_root' (CUSLICE_CUDA_ROOT of $build)"

debian11_root || exit
root=$debian11_dir
debian11_sources "$cuda_root"

# The hook, and the scheduler with its loader and libraries behind a script that runs it with them.
rm -rf "$root/opt/cuslice"
mkdir -p "$root/opt/cuslice/host"
cp "$hook" "$root/opt/cuslice/libcuslice.so"
loader=$(readelf -l "$scheduler" | sed -n 's/.*interpreter: \(.*\)]$/\1/p')
[ -n "$loader" ] || die "no program interpreter in $scheduler"
{ echo "$loader"; env -u LD_LIBRARY_PATH ldd "$scheduler" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'; } |
  xargs cp -L -t "$root/opt/cuslice/host/" "$scheduler"
printf '#!/bin/sh\nexec /opt/cuslice/host/%s --library-path /opt/cuslice/host /opt/cuslice/host/cuslice-scheduler "$@"\n' \
  "$(basename "$loader")" >"$root/opt/cuslice/cuslice-scheduler"
chmod +x "$root/opt/cuslice/cuslice-scheduler"

debian11_run "{ cmake -S /src -B /build-hook-tests -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
                 -DCUSLICE_HOOK_ONLY=ON -DCUSLICE_PREBUILT_HOOK=/opt/cuslice/libcuslice.so \
                 -DCUSLICE_TEST_SCHEDULER=/opt/cuslice/cuslice-scheduler -DCUSLICE_CUDA_ROOT=$cuda_root &&
               cmake --build /build-hook-tests -j $(nproc); } >/build-hook-tests.log 2>&1" ||
  { tail -40 "$root/build-hook-tests.log"; die "building the tests in the root failed ($root/build-hook-tests.log)"; }
debian11_run "ctest --test-dir /build-hook-tests --output-on-failure -j $(nproc)"
