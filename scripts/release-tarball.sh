#!/usr/bin/env bash
# The release tarball, which runs on glibc 2.31 and newer (Ubuntu 20.04 and later, RHEL 9,
# Debian 11 and later): the programs built on Debian 11 in the root of scripts/debian11-root.sh,
# around the hook as this build made it on Debian 12 (it needs glibc 2.28), then packed by cpack
# there with the libraries they load (cmake/BundleRuntime.cmake), and checked there by
# tests/package's tarball tests, with no library newer than glibc 2.31 and GCC 10's libstdc++.
#
#   bash scripts/release-tarball.sh [BUILD [OUT]]
#
# BUILD: the Debian 12 build folder with hook/libcuslice.so (default build). OUT: where the
# tarball goes (default build-old-glibc/packages). The programs are built in the root's
# /build-release. Exit status 77: it cannot run here (not root, chroot or mount not permitted).
# .ci/hardened runs it (stage old-glibc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/debian11-root.sh"

case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
esac
build=${1:-build}
out=${2:-$debian11_work/packages}
die() {
  echo "release-tarball: $*" >&2
  exit 1
}

hook=$(realpath "$build/hook/libcuslice.so" 2>/dev/null) || die "no $build/hook/libcuslice.so: build first"
cuda_root=$(sed -n 's/^CUSLICE_CUDA_ROOT:PATH=//p' "$build/CMakeCache.txt")
[ -f "$cuda_root/include/cuda.h" ] || die "no cuda.h under '$cuda_root' (CUSLICE_CUDA_ROOT of $build)"

debian11_root || exit
root=$debian11_dir
debian11_sources "$cuda_root"
rm -rf "$root/opt/cuslice" "$root/packages"
mkdir -p "$root/opt/cuslice"
strip -o "$root/opt/cuslice/libcuslice.so" "$hook"  # as cpack strips what it packs

debian11_run "{ cmake -S /src -B /build-release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
                 -DCUSLICE_BUILD_TESTS=OFF -DCUSLICE_PREBUILT_HOOK=/opt/cuslice/libcuslice.so \
                 -DCUSLICE_CUDA_ROOT=$cuda_root &&
               cmake --build /build-release -j $(nproc) &&
               cpack -G TGZ --config /build-release/CPackConfig.cmake -B /packages; } >/build-release.log 2>&1" ||
  { tail -40 "$root/build-release.log"; die "building the tarball in the root failed ($root/build-release.log)"; }
tarball=$(cd "$root/packages" && ls cuslice-*-linux-*.tar.gz)
debian11_run "cd /src && CUSLICE_TARBALL=/packages/$tarball CUSLICE_TARBALL_GLIBC=2.31 CUSLICE_TARBALL_GLIBCXX=3.4.28 \
                CUSLICE_SOURCE_DIR=/src PYTHONDONTWRITEBYTECODE=1 \
                python3 -m pytest -p no:cacheprovider -q -rs tests/package/test_package.py"
mkdir -p "$out"
cp "$root/packages/$tarball" "$out/"
echo "release-tarball: $out/$tarball"
