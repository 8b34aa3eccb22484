"""The summary lines of each scenario of the spatial benchmark, from the records that
summarize.py gathered: for a scenario and variant, a mapping (config, round) -> role -> the
worker's JSON line (roles starting with "_" are the run's own: _run, _smi, _quotas,
_status.N). Pure arithmetic on those records; reads and writes nothing.
"""
from statistics import mean

SM_TARGETS = {"g1": 0.50, "g2": 0.25, "g3": 0.25}


def fmt(values, digits=2):
    """The mean, and every round's value in brackets when there is more than one."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    m = f"{mean(vals):.{digits}f}"
    return m if len(vals) == 1 else m + " [" + " ".join(f"{v:.{digits}f}" for v in vals) + "]"


def configs(by_run):
    seen = []
    for cfg, _ in by_run:
        if cfg not in seen:
            seen.append(cfg)
    return seen


def rounds(by_run, cfg):
    return sorted(r for c, r in by_run if c == cfg)


def errors(run, skip=()):
    out = []
    for role, rec in sorted(run.items()):
        if role not in skip and rec.get("error"):
            out.append(f"{role}: {rec['error'][:300]}")
    return ("; ERRORS " + "; ".join(out)) if out else ""


def services(run, prefix):
    return [rec for role, rec in sorted(run.items()) if role.startswith(prefix) and not role.startswith("_")]


def ok(rec, key):
    return rec is not None and not rec.get("error") and rec.get(key) is not None


def alone_value(by_run, rnd, role, key):
    """The alone run's figure in round rnd, else the mean over the rounds that have one."""
    rec = by_run.get(("alone", rnd), {}).get(role)
    if ok(rec, key):
        return rec[key]
    vals = [run[role][key] for (c, _), run in by_run.items() if c == "alone" and ok(run.get(role), key)]
    return mean(vals) if vals else None


def ratio(a, b):
    return None if a is None or not b else a / b


def alone_line(by_run, role, what):
    rs = rounds(by_run, "alone")
    good = [x for x in (by_run[("alone", r)].get(role) for r in rs) if ok(x, "it_per_s")]
    return (f"alone: {what}{fmt([x['it_per_s'] for x in good], 1)} it/s, "
            f"p50 {fmt([x['p50_ms'] for x in good], 3)} ms, p99 {fmt([x['p99_ms'] for x in good], 3)} ms"
            + "".join(errors(by_run[("alone", r)]) for r in rs))


def together_round(by_run, cfg, r):
    """The services' summed it/s and worst p99 in one run, each also over alone (None: a
    service had no figure)."""
    sv = services(by_run[(cfg, r)], "s")
    good = [x for x in sv if ok(x, "it_per_s")]
    if not sv or len(good) != len(sv):
        return None, None, None, None
    total, worst = sum(x["it_per_s"] for x in good), max(x["p99_ms"] for x in good)
    return (total, ratio(total, alone_value(by_run, r, "alone", "it_per_s")),
            worst, ratio(worst, alone_value(by_run, r, "alone", "p99_ms")))


def together(variant, by_run):
    lines = []
    for cfg in configs(by_run):
        if cfg == "alone":
            lines.append(alone_line(by_run, "alone", ""))
            continue
        rs = rounds(by_run, cfg)
        agg, agg_ratio, p99, p99_ratio = zip(*(together_round(by_run, cfg, r) for r in rs))
        errs = "".join(errors(by_run[(cfg, r)]) for r in rs)
        lines.append(f"{cfg}: 4 together, aggregate {fmt(agg, 1)} it/s = {fmt(agg_ratio)}x alone; "
                     f"worst p99 {fmt(p99, 3)} ms = {fmt(p99_ratio)}x alone{errs}")
    return lines


def sm_limits(variant, by_run):
    lines = []
    for cfg in configs(by_run):
        shares = {role: [] for role in SM_TARGETS}
        totals, errs = [], ""
        for r in rounds(by_run, cfg):
            run = by_run[(cfg, r)]
            tf = {role: run.get(role, {}).get("tflops") if ok(run.get(role), "tflops") else None
                  for role in SM_TARGETS}
            total = None if None in tf.values() else sum(tf.values())
            totals.append(total)
            for role in SM_TARGETS:
                shares[role].append(ratio(tf[role], total))
            errs += errors(run)
        limit = (lambda role: "no limit") if cfg == "native" else (lambda role: f"limit {SM_TARGETS[role]:.2f}")
        parts = ", ".join(f"{role} {fmt(shares[role])} ({limit(role)})" for role in SM_TARGETS)
        lines.append(f"{cfg}: share of the total throughput {parts}; total {fmt(totals, 1)} TFLOP/s{errs}")
    return lines


def lows_it(run):
    lows = services(run, "l")
    good = [x for x in lows if ok(x, "it_per_s")]
    return sum(x["it_per_s"] for x in good) if lows and len(good) == len(lows) else None


def priority(variant, by_run):
    lines = []
    for cfg in configs(by_run):
        rs = rounds(by_run, cfg)
        if cfg == "alone":
            lines.append(alone_line(by_run, "hi", "high (batch 8) "))
            continue
        hi_p99, hi_ratio, lows, lows_ratio, errs = [], [], [], [], ""
        for r in rs:
            run = by_run[(cfg, r)]
            hi = run.get("hi")
            p = hi["p99_ms"] if ok(hi, "p99_ms") else None
            hi_p99.append(p)
            hi_ratio.append(ratio(p, alone_value(by_run, r, "hi", "p99_ms")))
            lows.append(lows_it(run))
            lows_ratio.append(ratio(lows[-1], lows_it(by_run.get(("mps", r), {}))))
            errs += errors(run)
        lines.append(f"{cfg}: high p99 {fmt(hi_p99, 3)} ms = {fmt(hi_ratio)}x alone; lows {fmt(lows, 1)} it/s "
                     f"= {fmt(lows_ratio)}x their throughput under plain mps{errs}")
    return lines


def gpu0_tenants(snapshot):
    """name -> that tenant's entry under GPU 0 in a `cuslice status --json` answer."""
    for gpu in (snapshot or {}).get("gpus", []):
        if gpu.get("index") == 0:
            return {t["name"]: t for t in gpu.get("tenants", [])}
    return {}


def beside_trainer(variant, by_run):
    lines = []
    for (cfg, r), run in by_run.items():
        s0 = run.get("_status.0", {}).get("status")
        s1 = run.get("_status.1", {}).get("status")
        if not s0 or not s1:
            lines.append(f"{cfg} round {r}: no status read{errors(run)}")
            continue
        a, b = gpu0_tenants(s0.get("status")), gpu0_tenants(s1.get("status"))
        if not b:
            lines.append(f"{cfg} round {r}: status listed no tenant under GPU 0{errors(run)}")
            continue
        wall = s1["t"] - s0["t"]
        dt = {n: b[n].get("gpu_seconds", 0.0) - a.get(n, {}).get("gpu_seconds", 0.0) for n in b}
        group = [n for n in b if n != "trainer"]
        g_time, t_time = sum(dt[n] for n in group), dt.get("trainer", 0.0)
        ach = ", ".join(f"{n} {b[n].get('achieved_share', float('nan')):.2f} "
                        f"(target {b[n].get('share', float('nan')):.2f})" for n in sorted(b))
        sv = services(run, "s")
        it = sum(x["it_per_s"] for x in sv if ok(x, "it_per_s"))
        tr = run.get("trainer", {})
        lines.append(f"{cfg} round {r}: achieved shares {ach}; GPU time over {wall:.1f} s: group {g_time:.2f} s, "
                     f"trainer {t_time:.2f} s (group {ratio(g_time, g_time + t_time) or 0:.2f} of their sum); "
                     f"group {it:.1f} it/s, trainer {tr.get('tflops', 'n/a')} TFLOP/s{errors(run)}")
    return lines


def memory(variant, by_run):
    lines = []
    for (cfg, r), run in by_run.items():
        quotas = run.get("_quotas", {}).get("quotas", {})
        apps = {a["pid"]: a for a in run.get("_smi", {}).get("apps", [])}
        parts = []
        for role, rec in sorted(run.items()):
            if role.startswith("_") or rec.get("worker") != "service":
                continue
            app = apps.pop(rec.get("pid"), None)
            used, q = (app or {}).get("used_mib"), quotas.get(role)
            verdict = "not listed" if used is None else ("within" if q and used <= q else "OVER")
            parts.append(f"{role} {used} MiB of {q} MiB ({verdict}; reserved {rec.get('reserved_mib')}, "
                         f"driver used/total {rec.get('device_used_mib')}/{rec.get('device_total_mib')})")
        over = run.get("over", {})
        others = ", ".join(f"pid {p} {a['name']} {a['used_mib']} MiB" for p, a in apps.items())
        lines.append(f"{cfg} round {r}: " + "; ".join(parts)
                     + f"; over-quota process ({quotas.get('over')} MiB quota, asked {over.get('asked_gib')} GiB): "
                     + f"OOM {'yes' if over.get('oom') else 'NO'}, got {over.get('got_in_pieces_gib')} GiB in pieces"
                     + (f"; other processes in nvidia-smi: {others}" if others else "")
                     + errors(run, skip=("over",)) + (f"; over: {over['error']}" if over.get("error") else ""))
    return lines


def fate(rec):
    if rec is None:
        return "no result"
    if not rec.get("error"):
        return f"survived ({rec.get('it_per_s', 0):.1f} it/s)"
    when = f" after {rec['error_after_s']} s" if "error_after_s" in rec else ""
    return f"failed{when}: {rec['error'][:160]}"


def faulting(variant, by_run):
    lines = []
    for (cfg, r), run in by_run.items():
        bad = run.get("bad", {})
        fault = (f"fault by {bad.get('method')} at {bad.get('launched_after_s')} s: "
                 + (bad.get("error") or "NO FAULT (the scenario did not test anything)")
                 if bad.get("faulted") is not None else f"the faulting tenant failed: {bad.get('error')}")
        svc = "; ".join(f"{rec_role} {fate(run.get(rec_role))}" for rec_role in ("s1", "s2", "s3"))
        lines.append(f"{cfg} round {r}: {fault}; {svc}; a new service afterwards: {fate(run.get('late'))}"
                     + errors(run.get("_run") and {"_run": run["_run"]} or {}))
    return lines


REPORTS = {"a": together, "b": sm_limits, "c": priority, "d": beside_trainer, "e": memory, "f": faulting}
