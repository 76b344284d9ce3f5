"""How much the measuring client distorts what it measures, against the null server.

    python benchmarks/client_overhead.py [--workers 1,2] [--server-workers 1] [--requests 1024]

(a) 1 and 16 streams, 2 tokens per chunk: every metric's reported mean against the schedule's truth.
(b) 256 streams on a fast schedule (TTFT 20 ms, 100 tokens 5 ms apart: ~50,000 tokens/s offered):
    reported TTFT and TPOT against the truth, tokens/s reached, client CPU time per token, for each
    client process count in --workers, measured one after the other in this run.

Targets: (a) within 1%; (b) TTFT <= 60 ms and <= 20 us of client CPU per token.
The null server runs on the same machine as the client: on a small machine they share the cores,
and the server's own lateness (shown) is part of what the client sees.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from roofline.bench.calibrate import Case, run_case
from roofline.bench.schedule import Schedule


def show(r, full: bool) -> None:
    f = r.facts
    print(
        f"\n== {r.case.name}: {r.case.concurrency} streams, {r.case.workers} client process(es), "
        f"{r.case.server_workers} server process(es); "
        f"{f['requests_ok']} ok, {f['requests_failed']} failed"
    )
    for row in r.rows:
        if not full and row["key"] not in ("ttft_s", "tpot_s"):
            continue
        scale, unit = (1.0, "tok/s") if row["key"] == "output_speed_tok_per_s" else (1e3, "ms")
        print(
            f"  {row['metric']:<14} truth {row['truth'] * scale:10.3f} {unit:<5}  reported mean "
            f"{row['reported'] * scale:10.3f} ({row['error_pct']:+.2f}%)  "
            f"server sent {row['server_sent'] * scale:10.3f}"
            f"  client error {row['client_error_pct']:+.2f}%  p99 {row['reported_p99'] * scale:.3f}"
        )
    print(
        f"  tokens/s reached {f['output_tok_per_s']:.0f} of {f['offered_tok_per_s']:.0f} offered; "
        f"client CPU {f['client_cpu_us_per_token']:.1f} us/token; client delay per chunk p50 "
        f"{f['client_delay_p50_ms']:.3f} ms, p99 {f['client_delay_p99_ms']:.3f} ms; "
        f"first token sent {f['server_first_token_late_p50_ms']:.3f} ms after schedule "
        "(p50, server side)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2", help="client process counts to compare in (b)")
    ap.add_argument("--server-workers", type=int, default=2, help="null server processes in (b)")
    ap.add_argument("--requests", type=int, default=1024, help="requests in (b) (256 per round)")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="client-overhead-"))
    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
        "(shared: timings are noisy)"
    )
    paced = Schedule(ttft_s=0.2, gap_s=0.02, tokens=64, tokens_per_chunk=2)
    for c, n in ((1, 8), (16, 64)):
        show(run_case(Case(f"(a) c={c}, 2-token chunks", paced, c, n), root / f"a{c}"), full=True)
    fast = Schedule(ttft_s=0.02, gap_s=0.005, tokens=100, tokens_per_chunk=1)
    for w in (int(x) for x in a.workers.split(",")):
        case = Case(
            "(b) 256 streams, fast",
            fast,
            256,
            a.requests,
            workers=w,
            server_workers=a.server_workers,
        )
        show(run_case(case, root / f"b{w}"), full=False)
    print(f"\nrun folders under {root}")


if __name__ == "__main__":
    main()
