#!/usr/bin/env bash
# The hook's tests on an older glibc than it was built with: libcuslice.so as built here (Debian
# 12, glibc 2.36), preloaded into the fake driver and the hook's tests as Debian 11 (glibc 2.31)
# builds them, in a Debian 11 root made with debootstrap. The hook's baseline is glibc 2.28
# (hook/glibc_baseline.h); ctest's hook.glibc_baseline checks its symbol versions, this checks
# that it loads and works there. The tests that start a scheduler start this build's, run by
# the loader and libraries it runs with here: a daemon on a newer host serving a container with
# an older glibc.
#
#   bash tests/hook/old_glibc.sh [BUILD]     BUILD: the build folder (default build)
#
# Works in build-old-glibc/: the root (root/, kept for the next run while its package list is
# the same), with the sources, the CUDA headers, the hook and the scheduler copied in and the
# tests built in root/build. Needs root (debootstrap, chroot, mounting /proc and /dev/shm
# there), the Debian archive this machine's apt uses (CUSLICE_DEBIAN_MIRROR overrides it) and
# PyPI (cmake). Where it cannot run at all (not root, or chroot or mount not permitted) it says
# why and exits 77: skipped, not passed. .ci/hardened runs it (stage old-glibc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)

case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
esac
build=${1:-build}

suite=bullseye  # Debian 11, glibc 2.31
# What the tests need to build there; cmake from PyPI (fetched with this machine's pip and
# unpacked there): Debian 11's is older than the tree needs.
packages=g++,ninja-build,libgtest-dev,libgmock-dev,python3
cmake_version=3.25.2
work=$source_dir/build-old-glibc
root=$work/root
jobs=$(nproc)

skip() {
  echo "old-glibc: SKIPPED, $*" >&2
  exit 77
}
die() {
  echo "old-glibc: $*" >&2
  exit 1
}

hook=$(realpath "$build/hook/libcuslice.so" 2>/dev/null) || die "no $build/hook/libcuslice.so: build first"
scheduler=$(realpath "$build/scheduler/cuslice-scheduler" 2>/dev/null) || die "no $build/scheduler/cuslice-scheduler"
cuda_root=$(sed -n 's/^CUSLICE_CUDA_ROOT:PATH=//p' "$build/CMakeCache.txt")
[ -f "$cuda_root/include/cuda.h" ] || die "no cuda.h under '$cuda_root' (CUSLICE_CUDA_ROOT of $build)"
[ "$(id -u)" -eq 0 ] || skip "it needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (scripts/setup.sh installs it)"
chroot / true 2>/dev/null || skip "chroot is not permitted here"
mkdir -p "$work/mount-probe"
mount -t tmpfs none "$work/mount-probe" 2>/dev/null || skip "mounting is not permitted here"
umount "$work/mount-probe"
rmdir "$work/mount-probe"

# The archive this machine's apt installs Debian from (deb822 .sources, or one-line lists).
debian_mirror() {
  sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }'
}
mirror=${CUSLICE_DEBIAN_MIRROR:-$(debian_mirror | tr ' ' '\n' | grep -m1 -E '/debian/?$' || true)}
[ -n "$mirror" ] || die "no Debian archive found in /etc/apt/sources.list*: set CUSLICE_DEBIAN_MIRROR"

mounted=()
unmount_all() {
  local m
  for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  mounted=()
}
trap unmount_all EXIT
in_root() {  # in_root COMMAND: runs a bash command in the root, with a clean environment
  chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root \
    LANG=C.UTF-8 /bin/bash -c "$1"
}

# The root: made once, kept while its packages are the same.
stamp="$suite $packages cmake==$cmake_version"
if [ "$(cat "$root/.cuslice-root" 2>/dev/null)" != "$stamp" ]; then
  rm -rf --one-file-system "$root"
  echo "old-glibc: debootstrap $suite from $mirror"
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; die "debootstrap failed (log: $work/debootstrap.log)"; }
  rm -rf "$work/wheel"
  python3 -m pip download --quiet --only-binary=:all: --no-deps -d "$work/wheel" "cmake==$cmake_version" ||
    die "cannot download cmake $cmake_version from PyPI (python3-pip: scripts/setup.sh installs it)"
  python3 -m zipfile -e "$work"/wheel/cmake-*.whl "$root/opt/cmake"
  chmod +x "$root"/opt/cmake/cmake/data/bin/*
  ln -s /opt/cmake/cmake/data/bin/cmake /opt/cmake/cmake/data/bin/ctest "$root/usr/local/bin/"
  echo "$stamp" >"$root/.cuslice-root"
fi

# What the tests need from here: the sources, the CUDA headers and stub, the hook, and the
# scheduler with its loader and libraries, behind a script that runs it with them.
rm -rf --one-file-system "$root/src" "$root/opt/cuslice" "$root$cuda_root"
mkdir -p "$root/src" "$root/opt/cuslice/host" "$root$cuda_root/lib64"
tar -C "$source_dir" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$root/src" -xf -
cp -a "$cuda_root/include" "$root$cuda_root/"
cp -a "$cuda_root/lib64/stubs" "$root$cuda_root/lib64/"
cp "$hook" "$root/opt/cuslice/libcuslice.so"
loader=$(readelf -l "$scheduler" | sed -n 's/.*interpreter: \(.*\)]$/\1/p')
[ -n "$loader" ] || die "no program interpreter in $scheduler"
{ echo "$loader"; env -u LD_LIBRARY_PATH ldd "$scheduler" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'; } |
  xargs cp -L -t "$root/opt/cuslice/host/" "$scheduler"
printf '#!/bin/sh\nexec /opt/cuslice/host/%s --library-path /opt/cuslice/host /opt/cuslice/host/cuslice-scheduler "$@"\n' \
  "$(basename "$loader")" >"$root/opt/cuslice/cuslice-scheduler"
chmod +x "$root/opt/cuslice/cuslice-scheduler"

mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount -t tmpfs -o mode=1777 shm "$root/dev/shm" && mounted+=("$root/dev/shm")

echo "old-glibc: $(in_root 'ldd --version | head -1'); $(in_root 'g++ --version | head -1')"
in_root "{ cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
             -DCUSLICE_TEST_HOOK=/opt/cuslice/libcuslice.so \
             -DCUSLICE_TEST_SCHEDULER=/opt/cuslice/cuslice-scheduler -DCUSLICE_CUDA_ROOT=$cuda_root &&
           cmake --build /build -j $jobs; } >/build.log 2>&1" ||
  { tail -40 "$root/build.log"; die "building the tests in the root failed (log: $root/build.log)"; }
in_root "ctest --test-dir /build --output-on-failure -j $jobs"
