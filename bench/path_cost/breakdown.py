"""Where the hook's instructions per call go: per-function costs from two callgrind dumps of
the launching thread (bench/path_cost/run.sh), one of N1 calls and one of N2, as
(cost(N2) - cost(N1)) / (N2 - N1), so that what a run does once cancels.

    python3 breakdown.py DUMP_N1 DUMP_N2 N1 N2 [--pass DUMP_N1 DUMP_N2]

Prints the thread's instructions per call by library (self cost), then a Markdown table of
the hook's functions (libcuslice.so) with calls, inclusive and self instructions per call:
first the hook's cuLaunchKernel, the driver's (what the hook forwards to) and their
difference, the hook's own; last the hook's calls into other libraries (the driver's gates
and marks, the C library's futex calls); then the hook's cuLaunchKernel by source line.
With --pass, the monitor thread's dumps of the same two runs: its instructions per call,
its looks at the streams (pass()) per call, and what a look costs (over both runs' looks).

Reads the callgrind format itself (name compression, relative positions, calls) because
callgrind_annotate splits a function's inclusive cost over the files inlined into it.
"""
import sys
from collections import defaultdict

HOOK = "libcuslice.so"


def parse(path):
    """(object, function) -> [self, inclusive, calls into it]; (caller, callee) -> [calls,
    inclusive]; the hook's cuLaunchKernel by source line, (file, line, what) -> [cost]
    (what: "self" or the function called there); the dump's total."""
    names = {"ob": {}, "fl": {}, "fn": {}}
    space = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
             "fn": "fn", "cfn": "fn"}
    self_cost = defaultdict(int)
    callees = defaultdict(lambda: defaultdict(int))  # caller -> callee -> inclusive
    calls_in = defaultdict(int)
    edges = defaultdict(lambda: [0, 0])
    lines = defaultdict(lambda: [0])
    ob = fn = cob = cfn = None
    fl = fi = None  # the function's file, and the file of the lines that follow (inlined code)
    at = 0  # the source line of the last cost line
    call_count = None  # set by calls=: the next cost line is that call's inclusive cost
    total = 0
    for raw in open(path, encoding="utf-8", errors="replace"):
        line = raw.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if eq and key in space:
            table = names[space[key]]
            if value.startswith("("):
                ident, _, name = value[1:].partition(")")
                name = name.strip()
                if name:
                    table[ident] = name
                value = table.get(ident, ident)
            if key == "ob":
                ob = value
            elif key == "cob":
                cob = value
            elif key == "fn":
                fn = (ob, value)
                fi = fl
            elif key == "fl":
                fl = fi = value
            elif key in ("fi", "fe"):
                fi = value
            elif key == "cfn":
                cfn = value
            continue
        if key == "calls" and eq:
            call_count = int(value.split()[0])
            continue
        if line.startswith("summary:"):
            total = int(line.split()[1])
            continue
        if not (line[0].isdigit() or line[0] in "+-*"):
            continue  # other header lines
        fields = line.split()
        cost = int(fields[1]) if len(fields) > 1 else 0
        if fields[0][0] in "+-":
            at += int(fields[0])
        elif fields[0] != "*":
            at = int(fields[0])
        if fn is not None and fn[1] == "cuLaunchKernel" and HOOK in short(fn[0]):
            what = "self" if call_count is None else cfn
            lines[(short(fi), at, what)][0] += cost
        if call_count is not None:
            callee = (cob if cob is not None else ob, cfn)
            if callee != fn:  # a recursive call is already in the function's own cost
                callees[fn][callee] += cost
            calls_in[callee] += call_count
            edges[(fn, callee)][0] += call_count
            edges[(fn, callee)][1] += cost
            call_count = None
            cob = cfn = None
        else:
            self_cost[fn] += cost
    result = {}
    for f in set(self_cost) | set(callees) | set(calls_in):
        s = self_cost.get(f, 0)
        result[f] = [s, s + sum(callees[f].values()), calls_in.get(f, 0)]
    return result, edges, lines, total


def per_call(a, b, n1, n2):
    """Each value list of b less a's, per call."""
    out = {}
    for k in set(a) | set(b):
        va, vb = a.get(k), b.get(k)
        zero = [0] * len(va or vb)
        out[k] = [(y - x) / (n2 - n1) for x, y in zip(va or zero, vb or zero)]
    return out


def short(obj):
    return obj.rsplit("/", 1)[-1] if obj else "?"


def fmt(x):
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.1f}"


def main(argv):
    if len(argv) not in (5, 8) or (len(argv) == 8 and argv[5] != "--pass"):
        print(__doc__, file=sys.stderr)
        return 2
    n1, n2 = int(argv[3]), int(argv[4])
    if n2 <= n1:
        raise ValueError(f"N2 ({n2}) must be more than N1 ({n1})")
    a, ea, la, ta = parse(argv[1])
    b, eb, lb, tb = parse(argv[2])
    d = per_call(a, b, n1, n2)
    by_object = defaultdict(float)
    for (o, _), v in d.items():
        by_object[short(o)] += v[0]
    print(f"launching thread: {fmt((tb - ta) / (n2 - n1))} instructions per call: "
          + ", ".join(f"{fmt(v)} in {o}" for o, v in sorted(by_object.items(), key=lambda x: -x[1])
                      if abs(v) >= 0.5) + "\n")
    print("| function | calls per call | inclusive instructions per call | self |")
    print("|---|---|---|---|")
    hook_launch = [v for (o, f), v in d.items() if f == "cuLaunchKernel" and HOOK in short(o)]
    driver_launch = [v for (o, f), v in d.items() if f == "cuLaunchKernel" and HOOK not in short(o)]
    if hook_launch and driver_launch:
        h, r = hook_launch[0], driver_launch[0]
        print(f"| `cuLaunchKernel` (hook) | {h[2]:.2f} | {fmt(h[1])} | {fmt(h[0])} |")
        print(f"| `cuLaunchKernel` (driver, forwarded to) | {r[2]:.2f} | {fmt(r[1])} | {fmt(r[0])} |")
        print(f"| hook's own (hook − driver) | | **{fmt(h[1] - r[1])}** | |")
    rows = sorted(((v, f) for (o, f), v in d.items()
                   if HOOK in short(o) and f != "cuLaunchKernel" and abs(v[1]) >= 0.5),
                  key=lambda r: -r[0][1])
    for v, f in rows:
        print(f"| `{f}` | {v[2]:.2f} | {fmt(v[1])} | {fmt(v[0])} |")
    # What the hook calls outside itself besides the launch it forwards: the driver (gates,
    # marks), the C library (a wake of the monitor, a wait at the parking cap).
    e = per_call(ea, eb, n1, n2)
    for ((caller, callee), (calls, incl)) in sorted(e.items(), key=lambda x: -x[1][1]):
        if (HOOK in short(caller[0]) and HOOK not in short(callee[0]) and callee[1] != "cuLaunchKernel"
                and abs(incl) >= 0.5):
            print(f"| → `{callee[1]}` ({short(callee[0])}) from `{caller[1].split('(')[0]}` "
                  f"| {calls:.2f} | {fmt(incl)} | |")
    by_line = per_call(la, lb, n1, n2)
    if by_line:  # a launch path
        print("\nThe hook's `cuLaunchKernel` by source line (inlined code under its own file):\n")
        print("| file:line | instructions per call | |")
        print("|---|---|---|")
        for (f, at, what), v in sorted(by_line.items(), key=lambda x: (x[0][0], x[0][1], x[0][2])):
            if abs(v[0]) >= 0.5:
                print(f"| {f}:{at} | {fmt(v[0])} | {'own' if what == 'self' else 'in `' + what + '`'} |")
    if len(argv) == 8:
        ma, _, _, mta = parse(argv[6])
        mb, _, _, mtb = parse(argv[7])
        passes = {f: v for f, v in per_call(ma, mb, n1, n2).items() if f[1].endswith("::pass()")}
        counts_a = {f: v for f, v in ma.items() if f[1].endswith("::pass()")}
        counts_b = {f: v for f, v in mb.items() if f[1].endswith("::pass()")}
        calls = sum(v[2] for v in counts_a.values()) + sum(v[2] for v in counts_b.values())
        incl = sum(v[1] for v in counts_a.values()) + sum(v[1] for v in counts_b.values())
        print(f"\nmonitor thread: {fmt((mtb - mta) / (n2 - n1))} instructions per call; "
              f"{sum(v[2] for v in passes.values()):.3f} looks (pass()) per call; "
              f"{fmt(incl / calls) if calls else '-'} instructions per look")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError) as e:
        print(f"breakdown.py: {e}", file=sys.stderr)
        sys.exit(1)
