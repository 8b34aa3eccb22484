#!/usr/bin/env bash
# Builds the daemon, the CLI and the hook here (Debian 12) into a folder that the device tool's
# `run` carries to the GPU machine (Ubuntu 24.04, which has none of Debian's libyaml-cpp,
# libspdlog, libfmt ...):
#
#   bash scripts/gpu-bundle.sh [--rev REV] [DEST]   # DEST default .gpu-carry (git-ignored)
#
# Without --rev it builds the working tree as it is (build folder build-bundle); with --rev
# (e.g. HEAD) it builds that commit alone, from `git archive` (build-bundle-rev/src and
# build-bundle-rev/obj), so that uncommitted work of others in the tree stays out.
#
# Layout (the installed layout, so `bin/cuslice` finds `lib/libcuslice.so` by itself):
#   DEST/bin/cuslice-scheduler  DEST/bin/cuslice      RPATH $ORIGIN/../lib (DT_RPATH)
#   DEST/lib/libcuslice.so                            the hook (needs only libc)
#   DEST/lib/lib*.so.*                                every shared library the two programs
#                                                     load except glibc, libstdc++ and libgcc_s
#   DEST/BUNDLE_INFO                                  commit, dirty state, build date, sizes
#
# The programs are linked with --disable-new-dtags, so their RPATH is a DT_RPATH: the loader
# also searches it for the copied libraries' own dependencies (libsystemd's libcap, libzstd,
# ...), so the copies in lib/ win over whatever the GPU machine has. Binaries built against
# glibc 2.36 run on the newer glibc there. Build folders are git-ignored (/build*/).
#
# On the GPU machine:  run(command="bash bench/run_compute.sh", carry=[".gpu-carry"])
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rev=""
dest=""
while (($#)); do
  case $1 in
    --rev) rev=${2:?--rev needs a commit}; shift 2 ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) dest=$1; shift ;;
  esac
done
dest=${dest:-$root/.gpu-carry}
case $dest in /*) ;; *) dest=$root/$dest ;; esac
src=$root
build=$root/build-bundle
if [ -n "$rev" ]; then
  commit_full=$(git rev-parse --verify "$rev^{commit}")
  src=$root/build-bundle-rev/src
  build=$root/build-bundle-rev/obj
  # Reuse the extracted tree when it is the same commit, so that ninja rebuilds nothing.
  if [ "$(cat "$src/.bundle-rev" 2>/dev/null)" != "$commit_full" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$commit_full" | tar -x -C "$src"
    echo "$commit_full" >"$src/.bundle-rev"
  fi
fi

# Keep the bundle out of git even if .gitignore changes.
exclude=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [ -n "$exclude" ] && [[ $dest == "$root"/* ]]; then
  mkdir -p "$(dirname "$exclude")"
  rel=${dest#"$root"/}
  grep -qxF "/$rel/" "$exclude" 2>/dev/null || echo "/$rel/" >>"$exclude"
fi

echo "== configuring $build (Release, no tests)"
# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUSLICE_BUILD_TESTS=OFF \
  -DCMAKE_SKIP_BUILD_RPATH=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >/dev/null
echo "== building cuslice-scheduler, cuslice, libcuslice.so"
cmake --build "$build" --target cuslice-scheduler cuslice_cli cuslice -j "$(nproc)" >/dev/null \
  || { echo "build failed: cmake --build $build for the details" >&2; exit 1; }

daemon=$build/scheduler/cuslice-scheduler
cli=$build/cli/cuslice
hook=$build/hook/libcuslice.so
for f in "$daemon" "$cli" "$hook"; do [ -f "$f" ] || { echo "missing $f" >&2; exit 1; }; done

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
cp "$daemon" "$cli" "$dest/bin/"
cp "$hook" "$dest/lib/"

# Libraries that every glibc system has, in a version at least as new as Debian 12's.
is_system() {
  case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnss_*.so.* | \
      libstdc++.so.* | libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
copied=()
for f in "$daemon" "$cli" "$hook"; do
  # ldd lists the whole closure ("name => path (addr)").
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    is_system "$name" && continue
    if [ "$path" = "not" ]; then echo "unresolved library $name of $f" >&2; exit 1; fi
    if [ ! -e "$dest/lib/$name" ]; then
      cp -L "$path" "$dest/lib/$name"
      copied+=("$name")
    fi
  done < <(ldd "$f")
done
strip --strip-unneeded "$dest"/bin/* "$dest"/lib/*.so* 2>/dev/null || true

# Check: every non-system library of the programs now resolves inside the bundle.
for f in "$dest"/bin/*; do
  bad=$(env -u LD_LIBRARY_PATH ldd "$f" | while read -r name arrow path _; do
          [ "$arrow" = "=>" ] || continue
          is_system "$name" && continue
          [ "$(readlink -f "$path")" = "$dest/lib/$name" ] || echo "$name"
        done)
  [ -z "$bad" ] || { echo "$f still loads from outside the bundle: $bad" >&2; exit 1; }
  # shellcheck disable=SC2016
  readelf -d "$f" | grep -q 'RPATH.*\$ORIGIN/../lib' || { echo "$f has no DT_RPATH" >&2; exit 1; }
done
"$dest/bin/cuslice-scheduler" --help >/dev/null
"$dest/bin/cuslice" version >/dev/null

if [ -n "$rev" ]; then
  commit="$(git rev-parse --short "$commit_full") ($rev, committed tree only)"
  dirty=""
else
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=""
  if git -C "$root" status --porcelain -- CMakeLists.txt hook protocol scheduler cli config 2>/dev/null | grep -q .; then
    dirty=" + the working tree's uncommitted changes"
  fi
fi
size=$(du -sb "$dest" | cut -f1)
{
  echo "commit: $commit$dirty"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "copied libraries: ${copied[*]:-none}"
  echo "size: $size bytes"
  (cd "$dest" && find . -type f ! -name BUNDLE_INFO | sort | xargs ls -l | awk '{print "  " $5 "  " $9}')
} >"$dest/BUNDLE_INFO"

cat "$dest/BUNDLE_INFO"
mib=$((size / 1048576))
echo "bundle: $dest, $mib MiB ($size bytes); the run tool carries at most 64 MiB with the tree"
if ((size > 32 * 1048576)); then echo "warning: the bundle is over 32 MiB" >&2; fi
