# The Debian 11 (glibc 2.31) root in which CI tests the hook on an older glibc than it is built
# with (tests/hook/old_glibc.sh) and the release tarball is built (scripts/release-tarball.sh).
# Source this file; it defines functions only.
#
#   . scripts/debian11-root.sh
#   debian11_root || exit     # makes build-old-glibc/root, or keeps it; mounts its /proc and /dev/shm
#   debian11_sources          # this checkout and the CUDA headers, copied to /src and $cuda_root
#   debian11_run 'cmake ...'  # a bash command in the root, with an empty environment
#
# The root has Debian 11's compiler (GCC 10), the libraries the programs link that Debian 11 has,
# and, built from Debian 12's sources, those it lacks or has too old (fmt, spdlog, prometheus-cpp,
# CLI11, nlohmann-json, in /usr/local), so that the programs build as on Debian 12; cmake comes
# from PyPI (Debian 11's is older than the tree needs), fetched with this machine's pip. It is
# kept for the next run while what it holds is the same. Needs root (debootstrap, chroot, mounts)
# and the Debian archive this machine's apt uses (CUSLICE_DEBIAN_MIRROR overrides it).
# debian11_root returns 77, and says why, where it cannot run at all: not root, or chroot or
# mount not permitted. The mounts go when the sourcing shell exits (an EXIT trap).

debian11_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
debian11_work=$debian11_repo/build-old-glibc
debian11_dir=$debian11_work/root
debian11_suite=bullseye  # Debian 11
debian11_packages=g++,ninja-build,pkg-config,patchelf,python3,python3-pytest,libgtest-dev,libgmock-dev,libyaml-cpp-dev,libsystemd-dev,libmicrohttpd-dev,libgrpc++-dev,libprotobuf-dev,protobuf-compiler,protobuf-compiler-grpc,libcurl4-openssl-dev,dpkg-dev,xz-utils
# Debian 12's source packages built there: CMAKE-ARGS for each.
debian11_from_source=(
  "fmtlib -DFMT_TEST=OFF -DFMT_DOC=OFF"
  "spdlog -DSPDLOG_FMT_EXTERNAL=ON -DSPDLOG_BUILD_SHARED=ON -DSPDLOG_BUILD_EXAMPLE=OFF -DSPDLOG_BUILD_TESTS=OFF"
  "prometheus-cpp -DENABLE_PULL=OFF -DENABLE_PUSH=OFF -DENABLE_COMPRESSION=OFF -DENABLE_TESTING=OFF -DUSE_THIRDPARTY_LIBRARIES=OFF"
  "cli11 -DCLI11_BUILD_TESTS=OFF -DCLI11_BUILD_EXAMPLES=OFF -DCLI11_BUILD_DOCS=OFF"
  "nlohmann-json3 -DJSON_BuildTests=OFF -DJSON_Install=ON"
)
debian11_source_suite=bookworm  # Debian 12: the versions the .deb is built with
debian11_cmake=3.25.2
debian11_mounts=()

debian11_run() {  # debian11_run COMMAND: runs a bash command in the root
  chroot "$debian11_dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    HOME=/root LANG=C.UTF-8 /bin/bash -c "$1"
}

debian11_unmount() {
  local m
  for m in "${debian11_mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  debian11_mounts=()
}

# The archive this machine's apt installs Debian from (deb822 .sources, or one-line lists).
_debian11_mirror() {
  {
    sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }'
  } | tr ' ' '\n' | grep -m1 -E '/debian/?$'
}

_debian11_make() {  # _debian11_make MIRROR: a new root
  local mirror=$1 entry name args
  rm -rf --one-file-system "$debian11_dir"
  mkdir -p "$debian11_work"
  echo "debian11-root: debootstrap $debian11_suite from $mirror" >&2
  debootstrap --variant=minbase --include="$debian11_packages" "$debian11_suite" "$debian11_dir" "$mirror" \
    >"$debian11_work/debootstrap.log" 2>&1 ||
    { tail -20 "$debian11_work/debootstrap.log" >&2; echo "debootstrap failed ($debian11_work/debootstrap.log)" >&2; return 1; }
  rm -rf "$debian11_work/wheel"
  python3 -m pip download --quiet --only-binary=:all: --no-deps -d "$debian11_work/wheel" "cmake==$debian11_cmake" ||
    { echo "cannot download cmake $debian11_cmake from PyPI (python3-pip: scripts/setup.sh installs it)" >&2; return 1; }
  python3 -m zipfile -e "$debian11_work"/wheel/cmake-*.whl "$debian11_dir/opt/cmake"
  chmod +x "$debian11_dir"/opt/cmake/cmake/data/bin/*
  ln -s /opt/cmake/cmake/data/bin/cmake /opt/cmake/cmake/data/bin/ctest /opt/cmake/cmake/data/bin/cpack \
    "$debian11_dir/usr/local/bin/"
  echo "deb-src $mirror $debian11_source_suite main" >"$debian11_dir/etc/apt/sources.list.d/sources.list"
  debian11_run "apt-get update -qq" >&2 || return 1
  for entry in "${debian11_from_source[@]}"; do
    read -r name args <<<"$entry"
    echo "debian11-root: $name from $debian11_source_suite's sources" >&2
    debian11_run "set -e; mkdir -p /deps && cd /deps && apt-get source -qq $name/$debian11_source_suite >/dev/null 2>&1
      dir=\$(find . -maxdepth 1 -type d -name '$name-*' | head -1)
      cmake -S \$dir -B /deps/build-$name -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON $args >/dev/null
      cmake --build /deps/build-$name -j $(nproc) >/dev/null && cmake --install /deps/build-$name >/dev/null" ||
      { echo "building $name in the root failed" >&2; return 1; }
  done
  debian11_run "ldconfig && rm -rf /deps"
}

debian11_root() {
  [ "$(id -u)" -eq 0 ] || { echo "debian11-root: SKIPPED, it needs root (debootstrap, chroot, mounts)" >&2; return 77; }
  command -v debootstrap >/dev/null ||
    { echo "debian11-root: debootstrap is not installed (scripts/setup.sh installs it)" >&2; return 1; }
  chroot / true 2>/dev/null || { echo "debian11-root: SKIPPED, chroot is not permitted here" >&2; return 77; }
  mkdir -p "$debian11_work/mount-probe"
  if ! mount -t tmpfs none "$debian11_work/mount-probe" 2>/dev/null; then
    rmdir "$debian11_work/mount-probe"
    echo "debian11-root: SKIPPED, mounting is not permitted here" >&2
    return 77
  fi
  umount "$debian11_work/mount-probe"
  rmdir "$debian11_work/mount-probe"

  local mirror=${CUSLICE_DEBIAN_MIRROR:-$(_debian11_mirror)}
  [ -n "$mirror" ] ||
    { echo "debian11-root: no Debian archive in /etc/apt/sources.list*: set CUSLICE_DEBIAN_MIRROR" >&2; return 1; }
  local stamp="$debian11_suite $debian11_packages cmake==$debian11_cmake ${debian11_from_source[*]} $debian11_source_suite"
  if [ "$(cat "$debian11_dir/.cuslice-root" 2>/dev/null)" != "$stamp" ]; then
    _debian11_make "$mirror" || return 1
    echo "$stamp" >"$debian11_dir/.cuslice-root"
  fi
  trap debian11_unmount EXIT
  mount -t proc proc "$debian11_dir/proc" && debian11_mounts+=("$debian11_dir/proc") || return 1
  mount -t tmpfs -o mode=1777 shm "$debian11_dir/dev/shm" && debian11_mounts+=("$debian11_dir/dev/shm") || return 1
  echo "debian11-root: $(debian11_run 'ldd --version | head -1'); $(debian11_run 'g++ --version | head -1')" >&2
}

debian11_sources() {  # debian11_sources CUDA_ROOT: this checkout at /src, the CUDA headers and stub
  local cuda_root=$1
  rm -rf --one-file-system "$debian11_dir/src" "$debian11_dir$cuda_root"
  mkdir -p "$debian11_dir/src" "$debian11_dir$cuda_root/lib64"
  tar -C "$debian11_repo" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$debian11_dir/src" -xf -
  cp -a "$cuda_root/include" "$debian11_dir$cuda_root/"
  cp -a "$cuda_root/lib64/stubs" "$debian11_dir$cuda_root/lib64/"
}
