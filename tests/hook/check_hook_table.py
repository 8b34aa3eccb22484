#!/usr/bin/env python3
"""Golden check of hook/base/hooked_symbols.def against the CUDA toolkit and the built library.

Every hooked CUDA name must be a name the driver exports (the stub libcuda.so's list), typed
with a PFN typedef cudaTypedefs.h defines for that very base name, at the version the
typedef names; every libc hook is typed PFN_<its name> (libc_api.h); and libcuslice.so must
export exactly the table plus dlsym/dlvsym.
"""
import re
import subprocess
import sys


def exported(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def main():
    table_path, typedefs_path, stub, hook_lib, nm = sys.argv[1:6]
    table = open(table_path).read()
    typedefs = open(typedefs_path).read()
    cuda = re.findall(r"^CUSLICE_CUDA_HOOK\((\w+),\s*(\w+),\s*(\d+)\)", table, re.M)
    nvml = re.findall(r"^CUSLICE_NVML_HOOK\((\w+),\s*(\w+)\)", table, re.M)
    libc = re.findall(r"^CUSLICE_LIBC_HOOK\((\w+),\s*(\w+)\)", table, re.M)
    errors = []
    if len(cuda) < 30:
        errors.append(f"only {len(cuda)} CUDA hooks parsed from {table_path}")
    driver = exported(nm, stub)
    for name, pfn, version in cuda:
        if name not in driver:
            errors.append(f"{name}: not exported by the driver ({stub})")
        m = re.fullmatch(r"PFN_(\w+?)_v(\d+)(_ptsz|_ptds)?", pfn)
        if not m:
            errors.append(f"{name}: {pfn} is not a PFN_<name>_v<version> typedef")
            continue
        base, pfn_version, suffix = m.group(1), m.group(2), m.group(3) or ""
        if not re.search(rf"\btypedef\b[^;]*\(CUDAAPI \*{pfn}\)", typedefs):
            errors.append(f"{name}: {pfn} is not in cudaTypedefs.h")
        if pfn_version != version:
            errors.append(f"{name}: version {version} but its typedef is {pfn}")
        stripped = re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", name)
        if stripped != base:
            errors.append(f"{name}: typed with {pfn}, which belongs to {base}")
        if name.endswith(("_ptsz", "_ptds")) != bool(suffix):
            errors.append(f"{name}: per-thread suffix does not match {pfn}")
    for name, pfn in libc:
        if pfn != f"PFN_{name}":
            errors.append(f"{name}: typed with {pfn}, not PFN_{name}")
    want = {n for n, _, _ in cuda} | {n for n, _ in nvml} | {n for n, _ in libc} | {"dlsym", "dlvsym"}
    have = exported(nm, hook_lib)
    if have != want:
        errors.append(f"libcuslice.so exports {sorted(have - want)} beyond the table and lacks {sorted(want - have)}")
    for e in errors:
        print("FAIL:", e)
    print(f"{len(cuda)} CUDA, {len(nvml)} NVML and {len(libc)} libc hooks checked: "
          f"{'ok' if not errors else 'errors'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
