"""Where a weight pass spends its time, instruction by instruction: `perf` on the JIT code.

numba's kernels live in anonymous executable memory, which `perf report` cannot name. This script
runs the passes under `perf record -e cpu-clock` (a timer: it works in VMs that expose no hardware
counters), and before the child exits it copies every anonymous executable mapping of its own
memory to a folder. The samples' addresses are then matched to those copies and disassembled with
objdump: the hottest 64-byte lines, the hottest loop (a backward jump spanning them) with samples
per instruction, and the shares of the pass in numba's code, Python and the kernel.

A sample lands on the instruction that was waiting to retire, so a load that missed shows up on
itself or on the instruction after it; uops per loop (what a throughput bound counts) are the
loop's instructions, printed with their mnemonics tallied.

    python benchmarks/profile_pass.py [--model FILE] [--dtype stored] [--rows 1] [--seconds 10]
        [--isa avx2] [--min-permille 2]

Needs `perf` and `objdump` on PATH (Debian: linux-perf, binutils) and perf_event_paranoid <= 2.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine_vs_peers import apply_isa, describe_cpu

LINE_BYTES = 64


def dump_executable_mappings(folder: Path) -> None:
    """Copy each anonymous r-x mapping of this process to folder/<start address hex>.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            named = len(parts) > 5
            if "x" not in parts[1] or named:
                continue
            start, end = (int(v, 16) for v in parts[0].split("-"))
            mem.seek(start)
            (folder / f"{start:x}.bin").write_bytes(mem.read(end - start))


def child(args) -> None:
    """The profiled process: time passes for --seconds, then dump the JIT code."""
    from roofline.engine import load_runner
    from roofline.engine.runtime.pass_timing import pass_seconds, timing_slot

    runner = load_runner(
        args.model, dtype=args.dtype, threads=args.threads, max_seq_len=max(64, 2 * args.rows)
    )
    runner.thread_chooser = None
    describe_cpu(runner.threads)
    times = []
    with timing_slot(runner):
        for _ in range(3):
            pass_seconds(runner, args.rows)
        Path(args.marks).write_text(f"{time.clock_gettime(time.CLOCK_MONOTONIC)}\n")
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            times.append(pass_seconds(runner, args.rows) * 1e3)
        with open(args.marks, "a") as f:
            f.write(f"{time.clock_gettime(time.CLOCK_MONOTONIC)}\n")
    times.sort()
    print(
        f"{args.rows}-row passes: {len(times)}, min {times[0]:.2f} / median "
        f"{times[len(times) // 2]:.2f} / max {times[-1]:.2f} ms"
    )
    dump_executable_mappings(Path(args.code))


def samples(perf_data: Path, window: tuple[float, float]) -> list[tuple[int, str]]:
    """(address, where) of each sample inside the timed window (perf's clock is the
    monotonic one)."""
    out = subprocess.run(
        ["perf", "script", "-i", str(perf_data), "-F", "time,ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got = []
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        t = float(parts[0].rstrip(":"))
        if window[0] <= t <= window[1]:
            got.append((int(parts[1], 16), parts[2] if len(parts) > 2 else ""))
    return got


def disassemble(code: bytes, start: int) -> list[tuple[int, str]]:
    """[(address, instruction)] of x86-64 machine code that starts at address `start`."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        text = subprocess.run(
            ["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", "--no-show-raw-insn",
             f"--adjust-vma={start:#x}", f.name],
            capture_output=True,
            check=True,
        ).stdout.decode()  # fmt: skip
    lines = []
    for line in text.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if m:
            lines.append((int(m.group(1), 16), m.group(2).strip()))
    return lines


def report(args, code: Path, hits: list[tuple[int, str]]) -> None:
    regions = []
    for f in code.glob("*.bin"):
        start = int(f.stem, 16)
        regions.append((start, start + f.stat().st_size, f))

    def region_of(ip):
        return next((r for r in regions if r[0] <= ip < r[1]), None)

    total = len(hits)
    by_where = collections.Counter()
    jit = collections.Counter()
    for ip, where in hits:
        if region_of(ip):
            jit[ip] += 1
            by_where["numba's kernels (JIT code)"] += 1
        else:
            dso = re.search(r"\(([^)]*)\)\s*$", where)
            by_where[Path(dso.group(1)).name if dso else "?"] += 1
    print(f"\n{total} samples in the timed window (cpu-clock), by code:")
    for name, n in by_where.most_common(8):
        print(f"  {100 * n / total:5.1f}%  {name}")
    if not jit:
        return
    lines = collections.Counter()
    for ip, n in jit.items():
        lines[ip - ip % LINE_BYTES] += n
    print(f"\nhottest {LINE_BYTES}-byte lines of JIT code (% of all samples):")
    for line, n in lines.most_common(8):
        print(f"  {line:#x}  {100 * n / total:5.1f}%")
    # the hottest loop: disassemble around the hottest line, find the backward jump closing it
    hot = lines.most_common(1)[0][0]
    start, _, path = region_of(hot)
    lo = max(start, hot - 4096)
    code = path.read_bytes()[lo - start : lo - start + 8192]
    insns = disassemble(code, lo)
    loop = None
    for at, text in insns:
        m = re.match(r"j\w+\s+(?:0x)?([0-9a-f]+)", text)
        if m and at >= hot and int(m.group(1), 16) <= hot:
            loop = (int(m.group(1), 16), at)
            break
    if loop is None:
        return
    body = [(at, text) for at, text in insns if loop[0] <= at <= loop[1]]
    in_loop = sum(jit.get(at, 0) for at, _ in body)
    print(
        f"\nthe hottest loop: {len(body)} instructions, {100 * in_loop / total:.1f}% of samples; "
        "mnemonics:"
    )
    tally = collections.Counter(text.split()[0] for _, text in body)
    print("  " + ", ".join(f"{k} {v}" for k, v in tally.most_common()))
    print("\n  samples  instruction")
    for at, text in body:
        n = jit.get(at, 0)
        if n * 1000 >= total * args.min_permille:
            print(f"  {100 * n / total:6.2f}%  {text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a GGUF or folder (default: the shipped file)")
    ap.add_argument("--dtype", default="stored")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rows", type=int, default=1, help="x rows per pass (8: a verify pass)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--isa", choices=("host", "avx2"), default="host")
    ap.add_argument(
        "--min-permille", type=float, default=2.0, help="print loop lines with this share or more"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--code", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--marks", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    apply_isa(args.isa)
    if args.child:
        child(args)
        return
    for tool in ("perf", "objdump"):
        if shutil.which(tool) is None:
            sys.exit(f"profile_pass: needs `{tool}` on PATH")
    with tempfile.TemporaryDirectory(prefix="roofline-profile-") as tmp:
        work = Path(tmp)
        data, code, marks = work / "perf.data", work / "code", work / "marks"
        cmd = [
            "perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "cpu-clock",
            "-o", str(data), "--", sys.executable, *sys.argv,
            "--child", "--code", str(code), "--marks", str(marks),
        ]  # fmt: skip
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        window = tuple(float(v) for v in marks.read_text().split())
        report(args, code, samples(data, window))


if __name__ == "__main__":
    main()
