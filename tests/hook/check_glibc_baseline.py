#!/usr/bin/env python3
"""libcuslice.so loads on its glibc baseline (hook/base/glibc_baseline.h) with no C++ runtime.

The hook is preloaded into other people's programs, often by a container's /etc/ld.so.preload:
if it needs a newer glibc than the container has, no program there starts. So every symbol
version it needs must be GLIBC_x.y at most the baseline (no GLIBC_PRIVATE), none may be
libstdc++'s or libgcc_s's (GLIBCXX_, CXXABI_, GCC_), and it may name only glibc's own
libraries as dependencies.

    check_glibc_baseline.py LIBRARY OBJDUMP BASELINE      e.g. ... libcuslice.so objdump 2.28
"""
import re
import subprocess
import sys

# glibc's libraries: the hook may depend on these only.
GLIBC_LIBRARIES = {"libc.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libm.so.6",
                   "ld-linux-x86-64.so.2"}


def version_key(name):
    """GLIBC_2.3.4 -> (2, 3, 4)"""
    return tuple(int(p) for p in name.split("_", 1)[1].split("."))


def main():
    library, objdump, baseline = sys.argv[1:4]
    headers = subprocess.run([objdump, "-p", library], check=True, capture_output=True, text=True).stdout
    symbols = subprocess.run([objdump, "-T", library], check=True, capture_output=True, text=True).stdout
    needed = re.findall(r"^\s*NEEDED\s+(\S+)", headers, re.M)
    versions = set(re.findall(r"^\s*0x[0-9a-f]+ 0x[0-9a-f]+ \d+ (\S+)$", headers, re.M))
    # Undefined symbols and the version each needs: "... *UND* ... (GLIBC_2.34) dlopen"
    by_version = {}
    for version, name in re.findall(r"\*UND\*\s+\S+\s+\(?([A-Z]+_[\w.]+)\)?\s+(\S+)$", symbols, re.M):
        by_version.setdefault(version, []).append(name)

    errors = []
    if not needed or "libc.so.6" not in needed:
        errors.append(f"no NEEDED libc.so.6 found by {objdump} -p {library}")
    for name in needed:
        if name not in GLIBC_LIBRARIES:
            errors.append(f"depends on {name}: the hook may need glibc's own libraries only")
    limit = version_key("GLIBC_" + baseline)
    glibc = sorted((v for v in versions if re.fullmatch(r"GLIBC_\d+(\.\d+)+", v)), key=version_key)
    for version in sorted(versions):
        users = ", ".join(sorted(by_version.get(version, []))) or "(no symbol listed)"
        if re.fullmatch(r"GLIBC_\d+(\.\d+)+", version):
            if version_key(version) > limit:
                errors.append(f"{version} is newer than glibc {baseline}, needed by {users}: name an "
                              f"older version of each in hook/base/glibc_baseline.h")
        elif version.startswith(("GLIBCXX_", "CXXABI_", "GCC_")):
            errors.append(f"{version} is the C++ runtime's, needed by {users}: the hook links no "
                          f"C++ runtime (hook/base/cxx_runtime.cpp)")
        else:
            errors.append(f"{version} is not a public glibc version, needed by {users}")
    if not glibc:
        errors.append(f"no GLIBC_ version found by {objdump} -p {library}")

    for e in errors:
        print("FAIL:", e)
    newest = glibc[-1] if glibc else "none"
    print(f"{library}: newest version needed {newest} (baseline glibc {baseline}); "
          f"depends on {', '.join(needed)}: {'ok' if not errors else 'errors'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
