"""Does `roofline tune` decide the same thing run after run, and how long does it take?

Runs `roofline tune` N times in a row with the same arguments (each in its own run folder) and
prints, per run: wall time and the tuning time tune.json reports, trials run and engines
launched, the best configuration, its value and ratio to the baseline, every ladder step's
verdict (kept / tie / not kept, with the paired ratio and its interval), and each proposer
trial's predicted speed-up (predicted.json: replayed on the trial's own verify costs) against the
speed-up it measured over the same configuration without a proposer (paired); then how many runs
agreed on the best configuration, the times' min / median / max, the prediction error of the top
five predicted trials, and one `roofline tune --predict` run's time. Runs one after another, never
together (they would share the cores they measure).

Usage: python benchmarks/tune_repeat.py [--runs 3] [--out DIR] [--json FILE] [-- TUNE ARGS...]
       python benchmarks/tune_repeat.py --again DIR      (the figures of the runs left in DIR)
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
    cmd += [*([] if "--predict" in tune_args else ["--no-report"]), *tune_args]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"roofline tune failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return {"seconds": seconds, "result": json.loads(p.stdout)}


def earlier_run(runs_dir: Path) -> dict:
    """A run an earlier call made: its tune.json, the seconds it reports for tuning as its wall;
    its predicted.json made again by this checkout's code (the replay is deterministic; the
    proposer's time is measured again)."""
    from roofline.tune.predict_run import predict_and_write
    from roofline.tune.result import TuneResult
    from roofline.tune.tuner import read_options

    found = sorted(runs_dir.glob("*/tune.json"))
    if not found:
        raise SystemExit(f"no tune.json under {runs_dir}")
    result = json.loads(found[-1].read_text())
    t = TuneResult.from_json(result)
    predict_and_write(found[-1].parent, read_options(found[-1].parent), t.baseline, t.trials)
    return {"seconds": result.get("wall_s") or 0.0, "result": result}


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
        "tuning_s": t.wall_s,
        "launched": sum(1 for r in t.trials if r.status != "skipped"),
        "engines": sum(1 for r in t.trials if r.status != "skipped" and r.launched),
        "predicted": predicted_vs_measured(t),
        "best": None if best is None else dict(sorted(best.config.items())),
        "best_value": None if best is None else best.value,
        "ratio": best.value / base.value if best and base and base.value else None,
        "steps": steps,
    }


def predicted_vs_measured(t) -> list[dict]:
    """Each proposer trial of the run: predicted and measured speed-up over the trial its step
    measured next to it (the same configuration without a proposer, or the step's incumbent),
    best predicted first."""
    from roofline.tune.predict_run import read_predicted

    ladder = read_predicted(t.run_dir)
    rows = []
    for tp in ladder.trials if ladder else ():
        r, m = t.trial(tp.number), tp.measured
        if r is None or m is None or tp.predicted is None:
            continue
        rows.append(
            {
                "trial": tp.number,
                "against": tp.against,
                "config": dict(r.config),
                "predicted": tp.predicted,
                "tok_per_pass": tp.prediction.stats.tokens_per_pass,
                "measured": m.ratio,
                "measured_interval": [m.low, m.high],
                "error": tp.predicted / m.ratio - 1.0,
            }
        )
    return sorted(rows, key=lambda x: -x["predicted"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="run folders (default: a temp dir)")
    ap.add_argument("--json", metavar="FILE", help="write every run's figures to FILE")
    ap.add_argument(
        "--again",
        type=Path,
        default=None,
        metavar="OUT",
        help="run nothing: print the figures of the runs an earlier call left in OUT",
    )
    ap.add_argument("tune_args", nargs=argparse.REMAINDER, help="after --: passed to tune")
    args = ap.parse_args()
    tune_args = [a for a in args.tune_args if a != "--"]
    out = args.again or args.out or Path(tempfile.mkdtemp(prefix="tune-repeat-"))
    figures = []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs} ...", file=sys.stderr, flush=True)
        run = earlier_run(out / f"run{i + 1}") if args.again else None
        f = describe(run or one_run(tune_args, out / f"run{i + 1}"))
        figures.append(f)
        ratio = f"{f['ratio']:.2f}x" if f["ratio"] else "-"
        print(
            f"run {i + 1}: {f['seconds']:.0f} s ({f['tuning_s']:.0f} s tuning), {f['launched']} "
            f"trials on {f['engines']} engine launches, best {f['best']} "
            f"({f['best_value']:.1f}, {ratio})"
        )
        for knob, verdict, detail in f["steps"]:
            print(f"    {knob}: {verdict}  {detail}")
        for p in f["predicted"]:
            lo, hi = p["measured_interval"]
            print(
                f"    trial {p['trial']} {p['config']} against trial {p['against']}: predicted "
                f"{p['predicted']:.2f}x "
                f"({p['tok_per_pass']:.2f} tok/pass), measured {p['measured']:.2f}x "
                f"[{lo:.2f}, {hi:.2f}], error {100 * p['error']:+.0f}%"
            )
    agree = Counter(json.dumps(f["best"], sort_keys=True) for f in figures)
    config, count = agree.most_common(1)[0]
    secs = [f["seconds"] for f in figures]
    print(f"best configuration agreed in {count} of {len(figures)} runs: {config}")
    print(
        f"wall time min / median / max: {min(secs):.0f} / {statistics.median(secs):.0f} / "
        f"{max(secs):.0f} s"
    )
    top = [p for f in figures for p in f["predicted"][:5]]
    if top:
        errs = sorted(abs(p["error"]) for p in top)
        within = sum(e <= 0.15 for e in errs)
        print(
            f"top five predicted per run: |error| min / median / max {100 * errs[0]:.0f} / "
            f"{100 * statistics.median(errs):.0f} / {100 * errs[-1]:.0f}%, {within} of "
            f"{len(errs)} within 15%"
        )
    if args.again:
        return
    print("tune --predict ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "roofline", "tune", "--predict", "--runs", str(out / "predict")]
    p = subprocess.run([*cmd, *tune_args], capture_output=True, text=True)
    print(
        f"tune --predict: {time.perf_counter() - t0:.0f} s, exit {p.returncode}\n"
        + p.stdout[-4000:]
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
