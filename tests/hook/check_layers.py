#!/usr/bin/env python3
"""The hook's layers keep their order: no file of hook/ includes a header of a layer above its own.

    check_layers.py HOOK_DIR LAYER...

LAYER... are hook/'s folders, lowest first, as hook/CMakeLists.txt lists them. Every source
file under HOOK_DIR must sit in one of them, and each `#include "hook/<layer>/..."` must name
its own layer or one below. The build refuses such an include too (each layer compiles against
a view of the layers below it); this check says which file and line, and also covers headers
no source of their layer includes.
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"hook/([^/"]+)/[^"]+"', re.M)
SOURCES = ("*.h", "*.cpp", "*.c", "*.S", "*.def")


def violations(hook_dir: pathlib.Path, layers: list[str]) -> list[str]:
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for pattern in SOURCES:
        for path in sorted(hook_dir.rglob(pattern)):
            rel = path.relative_to(hook_dir)
            if len(rel.parts) < 2 or rel.parts[0] not in rank:
                found.append(f"{rel}: not in a layer's folder ({', '.join(layers)})")
                continue
            own = rel.parts[0]
            text = path.read_text()
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                line = text.count("\n", 0, m.start()) + 1
                if target not in rank:
                    found.append(f"{rel}:{line}: includes from hook/{target}/, which is no layer")
                elif rank[target] > rank[own]:
                    found.append(f"{rel}:{line}: layer {own} includes hook/{target}/, a layer above it")
    return found


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    hook_dir = pathlib.Path(sys.argv[1])
    found = violations(hook_dir, sys.argv[2:])
    for line in found:
        print(line)
    if found:
        return 1
    print(f"{len(sys.argv) - 2} layers in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
