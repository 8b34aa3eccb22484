# Finds the cuslice programs and hook that the GPU tests and benchmarks run (source this file;
# it defines functions only).
#
#   . scripts/cuslice-tree.sh
#   tree=$(cuslice_tree "${CUSLICE:-}") || exit 2
#   "$tree/bin/cuslice-scheduler" ...; LD_PRELOAD=$tree/lib/libcuslice.so ...
#
# cuslice_tree PATH prints a folder laid out as an installation (bin/cuslice,
# bin/cuslice-scheduler, lib/libcuslice.so). PATH may be:
#   - the release tarball (cuslice-<version>-linux-<arch>.tar.gz): unpacked into a new
#     temporary folder, which is printed (the caller may remove it);
#   - an unpacked tarball or an installation prefix (/opt/cuslice, /usr): printed as is;
#   - a build folder of this repository (build/): a temporary folder of links into it.
# Empty PATH: the installation whose cuslice-scheduler is on PATH, else ./build of the
# repository. Prints the reason on stderr and returns 1 when none is usable.

_cuslice_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

cuslice_tree() {
  local path=${1:-} dir
  if [ -z "$path" ]; then
    if command -v cuslice-scheduler >/dev/null; then
      path=$(dirname "$(dirname "$(readlink -f "$(command -v cuslice-scheduler)")")")
    elif [ -x "$_cuslice_repo/build/scheduler/cuslice-scheduler" ]; then
      path=$_cuslice_repo/build
    else
      echo "no cuslice found: pass the tarball, an unpacked tarball or a build folder" \
        "(--cuslice PATH), or put cuslice-scheduler on PATH" >&2
      return 1
    fi
  fi
  if [ -f "$path" ]; then
    case $path in
      *.tar.gz | *.tgz) ;;
      *) echo "$path: not a cuslice tarball (.tar.gz)" >&2; return 1 ;;
    esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/cuslice-tree.XXXXXX") || return 1
    tar -xzf "$path" -C "$dir" --strip-components=1 || { echo "$path: cannot unpack" >&2; return 1; }
    path=$dir
  elif [ -d "$path" ]; then
    path=$(cd "$path" && pwd)
    if [ -x "$path/scheduler/cuslice-scheduler" ] && [ ! -e "$path/bin/cuslice-scheduler" ]; then
      dir=$(mktemp -d "${TMPDIR:-/tmp}/cuslice-tree.XXXXXX") || return 1
      mkdir -p "$dir/bin" "$dir/lib"
      ln -s "$path/cli/cuslice" "$dir/bin/cuslice"
      ln -s "$path/scheduler/cuslice-scheduler" "$dir/bin/cuslice-scheduler"
      ln -s "$path/hook/libcuslice.so" "$dir/lib/libcuslice.so"
      if [ -x "$path/device_plugin/cuslice-device-plugin" ]; then
        ln -s "$path/device_plugin/cuslice-device-plugin" "$dir/bin/cuslice-device-plugin"
      fi
      path=$dir
    fi
  else
    echo "$path: no such file or folder" >&2
    return 1
  fi
  local f
  for f in bin/cuslice bin/cuslice-scheduler lib/libcuslice.so; do
    [ -e "$path/$f" ] || { echo "$path: no $f (not a cuslice installation or build)" >&2; return 1; }
  done
  if ldd "$path/bin/cuslice-scheduler" 2>/dev/null | grep -q 'not found'; then
    echo "$path/bin/cuslice-scheduler cannot load its libraries here:" >&2
    ldd "$path/bin/cuslice-scheduler" | grep 'not found' >&2
    echo "use the release tarball, which carries them" >&2
    return 1
  fi
  echo "$path"
}

# cuslice_version TREE: one line naming what TREE holds (for the logs of a run).
cuslice_version() {
  "$1/bin/cuslice" version 2>/dev/null | head -1 || echo "cuslice (version unknown)"
}
