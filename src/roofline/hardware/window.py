"""The bandwidth window of one run: read bandwidth measured right before and after it, and the
figure the run is held against.

A shared machine's bandwidth drifts from minute to minute, so a run is held against bandwidth
measured in its own minutes, not an older profile. The higher of the two is the bound: neither can
exceed what the memory delivers. When they differ by more than DRIFT_NOTE_FRACTION of the higher,
the drift is shown: something else shared the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

DRIFT_NOTE_FRACTION = 0.15

T = TypeVar("T")


def drift_fraction(before_bytes_per_s: float, after_bytes_per_s: float) -> float:
    """|after - before| / the higher of the two (0 when both are 0)."""
    high = max(before_bytes_per_s, after_bytes_per_s)
    return abs(after_bytes_per_s - before_bytes_per_s) / high if high > 0 else 0.0


@dataclass(frozen=True)
class BandwidthWindow:
    """Read bandwidth (bytes/s, each the best of the short probe's kernels) before and after one
    run; `after_bytes_per_s` is None until the run is over (or when it was interrupted)."""

    before_bytes_per_s: float
    after_bytes_per_s: float | None = None
    before_kernel: str = ""
    after_kernel: str = ""

    @property
    def bound_bytes_per_s(self) -> float:
        """The higher of the two: what the run is held against."""
        return max(self.before_bytes_per_s, self.after_bytes_per_s or 0.0)

    @property
    def drift_fraction(self) -> float | None:
        if self.after_bytes_per_s is None:
            return None
        return drift_fraction(self.before_bytes_per_s, self.after_bytes_per_s)

    def drift_is_large(self, threshold: float = DRIFT_NOTE_FRACTION) -> bool:
        d = self.drift_fraction
        return d is not None and d > threshold

    def closed(self, after_bytes_per_s: float, after_kernel: str = "") -> BandwidthWindow:
        """This window with the measurement after the run added."""
        return BandwidthWindow(
            self.before_bytes_per_s, after_bytes_per_s, self.before_kernel, after_kernel
        )

    def describe(self) -> str:
        """The window as one assumption line (starts with "bandwidth", as every ceiling's bandwidth
        line does)."""

        def gb(x: float, kernel: str) -> str:
            return f"{x / 1e9:.1f} GB/s" + (f" ({kernel})" if kernel else "")

        if self.after_bytes_per_s is None:
            return (
                f"bandwidth {self.bound_bytes_per_s / 1e9:.1f} GB/s: "
                f"this machine's read bandwidth measured right "
                f"before the run, best of the probe's read kernels "
                f"({gb(self.before_bytes_per_s, self.before_kernel)})"
            )
        text = (
            f"bandwidth {self.bound_bytes_per_s / 1e9:.1f} GB/s: "
            f"this machine's read bandwidth measured in the run's "
            f"window, the higher of before {gb(self.before_bytes_per_s, self.before_kernel)} "
            f"and after "
            f"{gb(self.after_bytes_per_s, self.after_kernel)}, "
            f"each the best of the probe's read kernels"
        )
        if self.drift_is_large():
            text += (
                f"; it drifted {100 * (self.drift_fraction or 0):.0f}% during the run: "
                f"something else used the "
                "memory, so compare runs side by side"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "before_bytes_per_s": self.before_bytes_per_s,
            "after_bytes_per_s": self.after_bytes_per_s,
            "before_kernel": self.before_kernel,
            "after_kernel": self.after_kernel,
            "bound_bytes_per_s": self.bound_bytes_per_s,
            "drift_fraction": self.drift_fraction,
            "drift_is_large": self.drift_is_large(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BandwidthWindow:
        after = d.get("after_bytes_per_s")
        return cls(
            float(d["before_bytes_per_s"]),
            None if after is None else float(after),
            str(d.get("before_kernel", "")),
            str(d.get("after_kernel", "")),
        )


# measure() -> (bytes/s, kernel that gave it)
Measure = Callable[[], "tuple[float, str]"]


def measure_window(run: Callable[[], T], measure: Measure) -> tuple[T, BandwidthWindow]:
    """run() between two measurements; its result and the window. If run() raises, so does this (the
    measurement after is skipped: nothing is held against it)."""
    before, before_kernel = measure()
    result = run()
    after, after_kernel = measure()
    return result, BandwidthWindow(before, after, before_kernel, after_kernel)


RUN_WINDOW = "a run window's short probe"


def short_probe(by: str = RUN_WINDOW, buf: Any = None) -> tuple[float, str]:
    """The short probe's best read rate and its kernel (the default `Measure`). A rate above the
    best the saved profile records raises it (`profile.note_read_rate`, credited to `by`), so the
    profile stays a bound on what this machine has shown it can read. buf: the probe's buffer,
    kept from an earlier probe (`readbw.probe_buffer`)."""
    from roofline.hardware.profile import note_read_rate
    from roofline.hardware.readbw import read_bandwidth_now

    rb = read_bandwidth_now(buf=buf)
    note_read_rate(rb.best_bytes_per_s, by=by, kernel=rb.best_kernel)
    return rb.best_bytes_per_s, rb.best_kernel


class ProbeBuffer:
    """The probe's buffer, written on first use and kept: a study's trials share one."""

    def __init__(self) -> None:
        self._buf: Any = None

    def get(self) -> Any:
        from roofline.hardware.readbw import probe_buffer

        if self._buf is None:
            self._buf = probe_buffer()
        return self._buf


class ProbeChain:
    """Back-to-back runs share the probe between them: the probe after one run is the probe before
    the next (nothing ran in between), so n runs take n + 1 probes instead of 2n, and each run is
    still held against the bandwidth of its own minutes. `for_run()` is one run's `Measure`: its
    first call (before) takes the last run's after-probe when there is one, its later calls
    (after) probe and keep the result for the next run.

    Without a `measure` of its own the chain probes with `short_probe` and keeps the probe's buffer
    (1 GiB, or a quarter of the memory) while it lives, or `buffer`'s, shared with other chains:
    writing it anew costs more than all the probe's reads of it."""

    def __init__(
        self,
        measure: Measure | None = None,
        by: str = RUN_WINDOW,
        buffer: ProbeBuffer | None = None,
    ) -> None:
        self._measure = measure or self._probe
        self._by = by
        self._buf = buffer or ProbeBuffer()
        self._carry: tuple[float, str] | None = None

    def _probe(self) -> tuple[float, str]:
        return short_probe(self._by, self._buf.get())

    def for_run(self) -> Measure:
        first = True

        def measure() -> tuple[float, str]:
            nonlocal first
            if first:
                first = False
                carried, self._carry = self._carry, None
                return carried if carried is not None else self._measure()
            self._carry = self._measure()
            return self._carry

        return measure
