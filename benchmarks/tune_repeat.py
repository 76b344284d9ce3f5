"""Does `roofline tune` decide the same thing run after run, and how long does it take?

Runs `roofline tune` N times in a row with the same arguments (each in its own run folder, a fresh
engine per trial as always) and prints, per run: wall time, trials launched, the best
configuration, its value and ratio to the baseline, and every ladder step's verdict (kept / tie /
not kept, with the paired ratio and its interval); then how many runs agreed on the best
configuration and the wall times' min / median / max. Runs one after another, never together
(they would share the cores they measure).

Usage: python benchmarks/tune_repeat.py [--runs 3] [--out DIR] [--json FILE] [-- TUNE ARGS...]
e.g.   python benchmarks/tune_repeat.py --runs 3 -- --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


def one_run(tune_args: list[str], runs_dir: Path) -> dict:
    """One `roofline tune --json` run: its result (tune.json's content) and wall seconds."""
    cmd = [sys.executable, "-m", "roofline", "tune", "--runs", str(runs_dir), "--json"]
    cmd += ["--no-report", *tune_args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"roofline tune failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return {"seconds": seconds, "result": json.loads(p.stdout)}


def describe(run: dict) -> dict:
    """The figures of one run, read through the typed result."""
    from roofline.tune.result import TuneResult

    t = TuneResult.from_json(run["result"])
    best, base = t.best, t.baseline
    steps = [
        (
            s.knob,
            "kept" if s.kept else ("tie" if s.paired and s.paired.verdict == "tie" else "no"),
            s.paired.describe() if s.paired else s.note,
        )
        for s in t.ladder
    ]
    return {
        "seconds": run["seconds"],
        "launched": sum(1 for r in t.trials if r.status != "skipped"),
        "best": None if best is None else dict(sorted(best.config.items())),
        "best_value": None if best is None else best.value,
        "ratio": best.value / base.value if best and base and base.value else None,
        "steps": steps,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="run folders (default: a temp dir)")
    ap.add_argument("--json", metavar="FILE", help="write every run's figures to FILE")
    ap.add_argument("tune_args", nargs=argparse.REMAINDER, help="after --: passed to tune")
    args = ap.parse_args()
    tune_args = [a for a in args.tune_args if a != "--"]
    out = args.out or Path(tempfile.mkdtemp(prefix="tune-repeat-"))
    figures = []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs} ...", file=sys.stderr, flush=True)
        f = describe(one_run(tune_args, out / f"run{i + 1}"))
        figures.append(f)
        ratio = f"{f['ratio']:.2f}x" if f["ratio"] else "-"
        print(
            f"run {i + 1}: {f['seconds']:.0f} s, {f['launched']} trials, best {f['best']} "
            f"({f['best_value']:.1f}, {ratio})"
        )
        for knob, verdict, detail in f["steps"]:
            print(f"    {knob}: {verdict}  {detail}")
    agree = Counter(json.dumps(f["best"], sort_keys=True) for f in figures)
    config, count = agree.most_common(1)[0]
    secs = [f["seconds"] for f in figures]
    print(f"best configuration agreed in {count} of {len(figures)} runs: {config}")
    print(
        f"wall time min / median / max: {min(secs):.0f} / {statistics.median(secs):.0f} / "
        f"{max(secs):.0f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
