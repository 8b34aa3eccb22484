"""bench/summarize.py turns bench/run.sh's log into the tables docs/evidence/benchmarks.md quotes: the
medians, the ratios paired within a round, the 95% interval of their median from 8 rounds on,
and the ratios a run measured inside itself (RATIO lines). Runs with known values go in; the
table must give back what they imply."""
import os
import subprocess
import sys
from pathlib import Path

SUMMARIZE = Path(os.environ.get("CUSLICE_SOURCE_DIR", Path(__file__).resolve().parents[2])) / "bench" / "summarize.py"


def summarize(tmp_path, lines):
    log = tmp_path / "bench.log"
    log.write_text("\n".join(lines) + "\n")
    md = tmp_path / "bench.md"
    subprocess.run([sys.executable, str(SUMMARIZE), str(log), str(md)], check=True, capture_output=True)
    return md.read_text()


def row(md, *cells):
    """The table row whose first cells are `cells`, split into its cells."""
    for line in md.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if parts[: len(cells)] == list(cells):
            return parts
    raise AssertionError(f"no row {cells} in:\n{md}")


def bench(name, ns):
    return f"BENCH {name} {ns} {ns} {ns} ns/op"


def test_paired_ratio_divides_each_run_by_its_own_rounds_native(tmp_path):
    # The native rate drifts 2x over the rounds; the hooked run is always 1.05x its round's.
    lines = []
    for r in range(1, 4):
        native = 1000 * r
        lines += [f"RUN {r} loop native", bench("launch", native), f"RUN {r} loop hooked", bench("launch", native * 1.05)]
    cells = row(summarize(tmp_path, lines), "loop", "launch", "hooked")
    assert cells[6].startswith("1.050 (1.050–1.050)")
    assert cells[7] == "—"  # fewer than 8 rounds: no interval
    assert cells[8] == "3+3"


def test_interval_from_eight_rounds_contains_the_median(tmp_path):
    ratios = [0.98, 1.00, 1.01, 1.02, 1.02, 1.03, 1.04, 1.06, 1.08, 1.10]
    lines = []
    for r, q in enumerate(ratios, 1):
        lines += [f"RUN {r} loop native", bench("launch", 3000), f"RUN {r} loop scheduled", bench("launch", 3000 * q)]
    cells = row(summarize(tmp_path, lines), "loop", "launch", "scheduled")
    assert cells[6].startswith("1.025 ")
    low, high = (float(x) for x in cells[7].split("–"))
    assert low <= 1.025 <= high and low >= 0.98 and high <= 1.10 and low < high


def test_in_process_ratios_get_a_table_of_their_own(tmp_path):
    lines = []
    for r in range(1, 10):  # nine rounds: the median is the fifth
        for cfg, q in (("native", 1.0 + r / 1000), ("hooked", 1.01), ("scheduled", 1.02 + r / 1000)):
            lines += [f"RUN {r} launch_in_process {cfg}", bench("launch_linked", 3000 * q), bench("launch_driver", 3000),
                      f"RATIO linked_over_driver {q:.4f}" + (" same-function" if cfg == "native" else "")]
    md = summarize(tmp_path, lines)
    native = row(md, "launch_in_process", "linked_over_driver", "native")
    scheduled = row(md, "launch_in_process", "linked_over_driver", "scheduled")
    assert native[3].startswith("1.005 (1.001–1.009)") and native[5] == "9"
    assert scheduled[3].startswith("1.025 (1.021–1.029)")
    low, high = (float(x) for x in scheduled[4].split("–"))
    assert 1.021 <= low <= 1.025 <= high <= 1.029
    # Native runs are the method's own error, listed first.
    assert md.index("| native |", md.index("ratio, inside each run")) < md.index("| scheduled |", md.index("ratio, inside each run"))


def test_no_ratio_lines_no_second_table(tmp_path):
    md = summarize(tmp_path, ["RUN 1 loop native", bench("launch", 1000), "RUN 1 loop hooked", bench("launch", 1010)])
    assert "inside each run" not in md
