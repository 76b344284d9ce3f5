"""`roofline probe`: measure this machine's memory bandwidth and matrix rates; save them."""

from __future__ import annotations

from typing import Any

import typer

# the full size still: server CPUs have last-level caches of 256 MiB and more
QUICK_SIZE_BYTES = 1 << 30
QUICK_REPEATS = 3
QUICK_MATMUL_N = 1024
QUICK_CUDA_MATMUL_N = 4096

# (section in the profile, key, label, unit, divisor)
_ROWS = [
    ("bandwidth_bytes_per_s", "read", "read", "GB/s", 1e9),
    ("bandwidth_bytes_per_s", "copy", "copy", "GB/s", 1e9),
    ("bandwidth_bytes_per_s", "triad", "triad", "GB/s", 1e9),
    ("bandwidth_bytes_per_s", "matvec_fp32", "matvec fp32", "GB/s", 1e9),
    ("flops", "matvec_fp32", "matvec fp32", "GFLOP/s", 1e9),
    ("flops", "matmul_fp32", "matmul fp32", "GFLOP/s", 1e9),
    ("flops", "matmul_bf16", "matmul bf16", "GFLOP/s", 1e9),
]


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)


def probe(
    size: str | None = typer.Option(
        None,
        "--size",
        help="Bytes each bandwidth kernel streams per pass, all its arrays together (e.g. 1GiB, "
        "256MiB, 1e9). Keep it far above the last-level cache. Default 1GiB.",
    ),
    repeats: int | None = typer.Option(
        None,
        "--repeats",
        help="Timed passes per kernel, after 2 warm-up passes; the table shows their "
        "best, median and min. Default 10, or 3 with --quick.",
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        help="Threads for the CPU kernels. Default: every CPU this process may use.",
    ),
    quick: bool = typer.Option(
        False, "--quick", help="A rough probe in a few seconds (smaller matrices, 3 passes)."
    ),
    save: bool = typer.Option(
        True,
        "--save/--no-save",
        help="Save the profile to the user cache (read by --hardware local).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the whole profile as JSON."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print the table as Markdown."),
) -> None:
    """Measure this machine: read, copy and triad bandwidth, and matvec / matmul rates; save the
    profile."""
    from roofline.hardware import probe as hw
    from roofline.units import parse_bytes

    settings: dict[str, Any] = {
        "size_bytes": parse_bytes(size, what="--size")
        if size is not None
        else (QUICK_SIZE_BYTES if quick else hw.DEFAULT_SIZE_BYTES),
        "repeats": repeats
        if repeats is not None
        else (QUICK_REPEATS if quick else hw.DEFAULT_REPEATS),
        "threads": threads,
        "matmul_n": QUICK_MATMUL_N if quick else hw.DEFAULT_MATMUL_N,
        "cuda_matmul_n": QUICK_CUDA_MATMUL_N if quick else hw.CUDA_MATMUL_N,
    }
    # checked before the progress bar starts, so a mistake prints as one clean line
    hw.check_settings(
        settings["size_bytes"], settings["repeats"], threads, matmul_n=settings["matmul_n"]
    )
    profile = _measure_with_progress(settings)
    profile["settings"]["quick"] = quick

    path = None
    if save:
        from roofline.hardware.profile import save_profile

        path = save_profile(profile)
    _print(profile, path, as_json=as_json, as_markdown=as_markdown)


def _measure_with_progress(settings: dict[str, Any]) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    from roofline.cli.progress import live_progress
    from roofline.hardware.probe import measure_profile

    columns = (
        TextColumn("probe: {task.description:<26}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with live_progress(
        *columns, console=Console(stderr=True), transient=True, label="probe: "
    ) as bar:
        task = bar.add_task("starting", total=None)

        def progress(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        return measure_profile(progress=progress, **settings)


def _cells(stats: dict[str, Any], divisor: float) -> list[str]:
    """best (the fastest pass), median, min."""
    return [
        f"{stats.get('best', stats['max']) / divisor:,.1f}",
        *(f"{stats[s] / divisor:,.1f}" for s in ("median", "min")),
    ]


def _rows(results: dict[str, Any], backend_of: dict[str, str], prefix: str = "") -> list[list[str]]:
    rows = []
    for section, key, label, unit, divisor in _ROWS:
        stats = results.get(section, {}).get(key)
        if not stats:
            continue
        kernels = stats.get("kernels") if key == "read" else None
        backend = (
            f"best of {len(kernels)}: {stats.get('kernel')}" if kernels else backend_of.get(key, "")
        )
        rows.append(
            [
                prefix + label + (" (ceiling)" if kernels else ""),
                *_cells(stats, divisor),
                unit,
                backend,
            ]
        )
        for name, each in (kernels or {}).items():  # each read kernel under the ceiling's row
            rows.append(
                [
                    f"{prefix}  read: {name}",
                    *_cells(each, divisor),
                    unit,
                    "numba" if name != "numpy-sum" else "numpy",
                ]
            )
    return rows


def _print(profile: dict[str, Any], path: Any, *, as_json: bool, as_markdown: bool) -> None:
    if as_json:
        from roofline.cli.output import print_json

        print_json({**profile, "profile_path": str(path) if path else None})
        return
    from roofline.cli.output import emit_table

    rows = _rows(profile, profile["backends"]["kernels"])
    if "cuda" in profile:
        gpu = profile["cuda"]
        rows += _rows(
            gpu, {key: gpu["backend"] for _, key, *_ in _ROWS}, prefix=f"{gpu['device']}: "
        )
    s = profile["settings"]
    notes = [
        (
            f"{profile['cpu']} (kernels compiled for {profile.get('kernel_isa', '?')}), threads: "
            f"{profile['threads']}; {s['repeats']} timed passes per "
            f"kernel after {s['warmup']} warm-up; {s['size_bytes'] / 2**20:,.0f} MiB per "
            "bandwidth kernel and matvec, "
            f"{_matmul_sizes(profile.get('flops', {}), s['matmul_n'])}."
        ),
        "Bytes counted as STREAM does (copy 2 arrays, triad 3); the CPU's write-allocate reads "
        "are not counted.",
        (
            "best = the fastest timed pass. The ceiling's read bandwidth is the best pass of the "
            "best read kernel (as STREAM reports its best time and the Empirical Roofline Toolkit "
            "its maximum over trials); the median is the typical rate. Read kernels: numpy sum "
            "and a SIMD sum over one slice per thread, and a gemv shaped like a decode step "
            "(every weight row read once)."
        ),
        f"Profile saved to {path}" if path else "Profile not saved (--no-save).",
    ]
    kept = _kept_best_note(profile)
    if kept:
        notes.append(kept)
    headers = ["kernel", "best", "median", "min", "unit", "backend"]
    title = f"roofline probe, measured {profile['measured_at']}"
    emit_table(title, headers, rows, as_markdown=as_markdown, notes=notes)


def _kept_best_note(profile: dict[str, Any]) -> str | None:
    """When the saved profile keeps a best read rate above this probe's (a run window, or an earlier
    probe, measured more): that rate, when and by what, since it is what `--hardware local` uses."""
    from roofline.hardware.profile import BEST_READ, probe_best_read

    kept, own = profile.get(BEST_READ), probe_best_read(profile)
    if (
        not isinstance(kept, dict)
        or own is None
        or not kept.get("bytes_per_s", 0) > own["bytes_per_s"]
    ):
        return None
    return (
        f"This probe's best read pass, {own['bytes_per_s'] / 1e9:,.1f} GB/s, is below the best "
        f"this machine has shown: {kept['bytes_per_s'] / 1e9:,.1f} GB/s by {kept.get('by', '?')} "
        f"at {kept.get('measured_at', '?')}; the profile keeps that one, so --hardware local "
        "stays a bound."
    )


def _matmul_sizes(flops: dict, asked: int) -> str:
    """'2048² matmul', or each matmul's own size where the probe took a smaller one (a pass would
    have taken over timing.MATMUL_PASS_SECONDS): 'matmul fp32 2048², bf16 512²'."""
    from roofline.hardware.timing import MATMUL_PASS_SECONDS

    used = {
        k.removeprefix("matmul_"): v.get("n", asked)
        for k, v in flops.items()
        if k.startswith("matmul_") and isinstance(v, dict)
    }
    if all(n == asked for n in used.values()):
        return f"{asked}² matmul"
    sizes = ", ".join(f"{k} {n}²" for k, n in used.items())
    return f"matmul {sizes} (smaller where a pass would take over {MATMUL_PASS_SECONDS} s)"
