"""Results of the spatial benchmark (bench/spatial/run.sh): gathers each run's worker lines
into one JSON-lines file, and turns that file into the summary lines of spatial.log (one per
scenario and configuration, with the ratios that matter, averaged over rounds with every
round's value beside). Standard library only; reads files, never touches the GPU.

    python3 summarize.py collect RUNDIR SCENARIO VARIANT CONFIG ROUND >>results.jsonl
    python3 summarize.py report results.jsonl
"""
import csv
import json
import os
import sys
from collections import defaultdict

from summary_lines import REPORTS


def last_json(path):
    try:
        with open(path) as f:
            lines = [line for line in f if line.strip().startswith("{")]
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def tail(path, n=3):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-n:] if line.strip())
    except OSError:
        return ""


def smi_rows(path):
    rows = []
    with open(path) as f:
        for rec in csv.reader(f):
            if len(rec) >= 2 and rec[0].strip().isdigit():
                try:
                    used = float(rec[1])
                except ValueError:  # "[N/A]" where the driver does not say
                    used = None
                rows.append({"pid": int(rec[0]), "used_mib": used,
                             "name": rec[2].strip() if len(rec) > 2 else ""})
    return rows


def collect(rundir, scenario, variant, config, rnd):
    tag = {"scenario": scenario, "variant": variant, "config": config, "round": int(rnd)}
    records = []
    failed = os.path.join(rundir, "FAILED")
    if os.path.exists(failed):
        records.append(dict(tag, role="_run", error=tail(failed, 20)))
    for name in sorted(os.listdir(rundir)):
        path = os.path.join(rundir, name)
        if name.endswith(".out"):
            role = name[:-4]
            res = last_json(path)
            if res is None:
                err = tail(os.path.join(rundir, role + ".err")) or "no output"
                res = {"error": f"no result line; stderr: {err}"}
            records.append(dict(tag, role=role, **res))
        elif name.startswith("status.") and name.endswith(".json"):
            try:
                with open(path) as f:
                    records.append(dict(tag, role="_" + name[:-5], status=json.load(f)))
            except ValueError as e:
                records.append(dict(tag, role="_" + name[:-5], error=f"status is not JSON: {e}"))
        elif name == "smi.csv":
            records.append(dict(tag, role="_smi", apps=smi_rows(path)))
        elif name == "quotas.json":
            with open(path) as f:
                records.append(dict(tag, role="_quotas", quotas=json.load(f)))
    for r in records:
        print(json.dumps(r, separators=(",", ":")))


def report(path):
    runs = defaultdict(lambda: defaultdict(dict))  # (scenario, variant) -> (config, round) -> role
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                runs[(r["scenario"], r["variant"])][(r["config"], r["round"])][r["role"]] = r
    broken = 0
    for (scenario, variant), by_run in runs.items():
        try:
            lines = REPORTS[scenario](variant, by_run)
        except Exception as e:  # noqa: BLE001 - one odd record must not hide the other scenarios
            lines, broken = [f"ERRORS the summary failed: {type(e).__name__}: {e}"], broken + 1
        for line in lines:
            print(f"{scenario}) {variant}: {line}")
    return 1 if broken else unexpected_errors(runs)


def unexpected_errors(runs):
    """How many records carry an error outside scenario f (where the workers' errors are the
    finding); says so on stderr."""
    n = 0
    for (scenario, _), by_run in runs.items():
        for run in by_run.values():
            for role, rec in run.items():
                if rec.get("error") and (scenario != "f" or role == "_run"):
                    n += 1
    if n:
        print(f"{n} unexpected error(s): see the lines marked ERRORS", file=sys.stderr)
    return 1 if n else 0


def main(argv):
    if len(argv) == 7 and argv[1] == "collect":
        collect(*argv[2:])
    elif len(argv) == 3 and argv[1] == "report":
        sys.exit(report(argv[2]))
    else:
        sys.exit(__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main(sys.argv)
