"""Which kernel shapes a runner's passes use: the defaults, or the fastest this host measured.

The free parameters of the matrix kernels (`kernels/kernel_shapes.KNOBS`) change no bit, so a host
may pick them by the clock alone. For one-row passes (decode) and for k-row passes (a verify of
`VERIFY_ROWS` rows stands for them: speculation, batches, prefill), each knob in turn is timed at
each of its values on the model's own weights, the others held at the best so far (a coordinate
descent: 9 shapes for one row, 12 for k rows, not the 20 and 60 of the whole grid). Rounds are
interleaved, so a drift of the host hits every value alike; a value replaces the incumbent only
when its median pass is `MARGIN` faster, so that noise keeps the defaults rather than flipping
between equals.

The choice is kept in the user cache under a key of everything that would change it: the CPU's
name and flags, the instruction set the kernels target, Python, numba and llvmlite, the kernels'
sources, the model file, the dtype and the thread count. A file whose key differs (another
machine's, copied) or that does not parse is ignored with a warning and measured again: a speed
choice from elsewhere is never trusted, though no choice could change an output.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from roofline.engine.kernels.kernel_shapes import (
    DEFAULT_SHAPE,
    KernelShape,
    PassRows,
    knobs_for,
)
from roofline.engine.runtime.measured_cache import measured_path, read_measured, write_measured
from roofline.engine.runtime.pass_timing import pass_seconds, timing_slot
from roofline.kernel_modes import KERNELS_MODES, KernelsMode

ChoiceSource = Literal["default", "measured", "cached"]
VERIFY_ROWS = 8  # the k-row pass timed: a speculative verify of 7 drafts
ROUNDS = 5  # timed rounds per knob (after one untimed)
MARGIN = 0.03  # a value must beat the incumbent's median pass by this much to replace it


@dataclass(frozen=True)
class KernelChoice:
    """The shapes of one-row and of k-row passes, and where they came from."""

    one_row: KernelShape = DEFAULT_SHAPE
    many_rows: KernelShape = DEFAULT_SHAPE
    source: ChoiceSource = "default"
    seconds: float = 0.0  # how long measuring took (0: not measured here)

    def for_rows(self, rows: int) -> KernelShape:
        return self.one_row if rows == 1 else self.many_rows

    def describe(self) -> str:
        """One line: the instruction set, what the passes use, and why."""
        from roofline.simd import kernel_isa

        how = {
            "default": "the defaults (--kernels default)",
            "measured": f"measured here in {self.seconds:.1f} s",
            "cached": "measured here before (user cache)",
        }[self.source]
        shapes = f"1 row: {self.one_row.describe()}; k rows: {self.many_rows.describe()}"
        return f"{kernel_isa()}; {shapes} ({how})"

    def to_json(self) -> dict[str, Any]:
        return {
            "one_row": self.one_row.to_json(),
            "many_rows": self.many_rows.to_json(),
            "source": self.source,
            "seconds": round(self.seconds, 2),
        }

    @classmethod
    def from_json(cls, d: object) -> KernelChoice:
        """The choice of a `to_json` object; ValueError when it is not one."""
        if not isinstance(d, dict) or d.get("source") not in get_args(ChoiceSource):
            raise ValueError(f"not a kernel choice: {d!r}")
        seconds = d.get("seconds")
        if not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(f"not a kernel choice: {d!r}")
        return cls(
            KernelShape.from_json(d.get("one_row")),
            KernelShape.from_json(d.get("many_rows")),
            d["source"],
            float(seconds),
        )


def choose_kernels(runner, mode: KernelsMode) -> KernelChoice:
    """The shapes for this runner: the defaults, this host's cached choice, or a new measurement
    (then cached)."""
    if mode not in KERNELS_MODES:
        raise ValueError(f"kernels must be one of {', '.join(KERNELS_MODES)}, got {mode!r}")
    if mode == "default":
        return KernelChoice()
    key = choice_key(runner.path, runner.dtype, runner.threads)
    path = choice_path(key)
    cached = read_choice(path, key)
    if cached is not None:
        return cached
    choice = measure_kernel_choice(runner)
    write_choice(path, key, choice)
    return choice


def measure_kernel_choice(runner, rounds: int = ROUNDS, margin: float = MARGIN) -> KernelChoice:
    """Time the knobs on the runner's model (the module docstring). Uses slot 0 and leaves it
    empty; the runner's own choice is restored. A runner of one position has no pass to time:
    the defaults."""
    if runner.max_seq_len < 2:
        return KernelChoice()
    started, kept = time.monotonic(), runner.kernels
    try:
        with timing_slot(runner):  # every shape on the same thread count
            one = _descend(runner, 1, "one", rounds, margin)
            many = one
            if runner.max_seq_len >= VERIFY_ROWS + 2:
                many = _descend(runner, VERIFY_ROWS, "many", rounds, margin)
    finally:
        runner.kernels = kept
    return KernelChoice(one, many, "measured", time.monotonic() - started)


def _descend(runner, rows: int, passes: PassRows, rounds: int, margin: float) -> KernelShape:
    """The coordinate descent over the knobs of these passes, from the defaults."""
    best = DEFAULT_SHAPE
    for knob in knobs_for(passes):
        shapes = [best._replace(**{knob.field: v}) for v in knob.values]
        medians = _median_pass_s(runner, rows, shapes, rounds)
        fastest = min(shapes, key=medians.__getitem__)
        if medians[fastest] < (1.0 - margin) * medians.get(best, float("inf")):
            best = fastest
    return best


def _median_pass_s(
    runner, rows: int, shapes: list[KernelShape], rounds: int
) -> dict[KernelShape, float]:
    """Median seconds of a `rows`-row pass of slot 0 in each shape, over interleaved rounds (a
    first round untimed: caches, page faults)."""
    seconds: dict[KernelShape, list[float]] = {s: [] for s in shapes}
    for round_ in range(rounds + 1):
        for s in shapes:
            runner.kernels = KernelChoice(s, s, "measured")
            took = pass_seconds(runner, rows)
            if round_:
                seconds[s].append(took)
    return {s: statistics.median(t) for s, t in seconds.items()}


def cpu_key() -> str:
    """The CPU's name and feature flags (numba compiles for the host's)."""
    from roofline.hardware.machine import cpu_flags, cpu_model_name

    return f"{cpu_model_name()}\n{cpu_flags()}"


def host_model_key(model: str | os.PathLike, dtype: str) -> dict[str, Any]:
    """What the engine's compiled kernels for a model file at a dtype depend on here: roofline,
    Python and numba, the CPU, the file (path, size, time) and the dtype. `prepare`'s stamp and
    the measured choice both start from it."""
    import numba

    from roofline import __version__

    path = Path(model).resolve()
    st = path.stat()
    return {
        "roofline": __version__,
        "python": sys.version,
        "numba": numba.__version__,
        "cpu": cpu_key(),
        "model": [str(path), st.st_size, st.st_mtime_ns],
        "dtype": dtype,
    }


def choice_key(model: str | os.PathLike, dtype: str, threads: int) -> dict[str, Any]:
    """Everything a measured choice depends on (the module docstring)."""
    import llvmlite

    from roofline.engine.kernels.kernel_cache import kernel_sources, sources_digest
    from roofline.simd import kernel_isa

    return {
        **host_model_key(model, dtype),
        "llvmlite": llvmlite.__version__,
        "isa": kernel_isa(),
        "sources": sources_digest(kernel_sources()),
        "threads": threads,
    }


def choice_path(key: dict[str, Any]) -> Path:
    """Where the choice for this key lives in the user cache (its name: the key's hash)."""
    return measured_path("kernel-shapes", key)


def read_choice(path: Path, key: dict[str, Any]) -> KernelChoice | None:
    """The choice stored at `path` for exactly this key; None (with a warning when a file is there
    but unusable) otherwise."""
    choice = read_measured(path, key, "choice", "kernel-shape cache", KernelChoice.from_json)
    if choice is None:
        return None
    return KernelChoice(choice.one_row, choice.many_rows, "cached", choice.seconds)


def write_choice(path: Path, key: dict[str, Any], choice: KernelChoice) -> None:
    """Store the choice atomically."""
    write_measured(path, key, "choice", choice.to_json())
