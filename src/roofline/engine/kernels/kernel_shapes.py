"""Kernel shapes as data: the free parameters of a pass's matrix kernels that no sum depends on.

A decode pass cuts each matrix into units of rows that the threads claim (`decode._claim`), hints
weight rows some bytes ahead of the rows it computes (`matrices`), and past four x rows walks the
weights in tiles that stay in L1 while every group of x rows passes over them. Each output is one
dot product, summed in `simd`'s fixed order by whichever thread claims its row, from the same
widened lanes whatever row block it sits in (a test holds every variant to the default, bit for
bit): so these parameters change the speed only, and can be chosen per host by timing them
(`runtime/kernel_choice`). The shapes that do change the machine code (weight and x rows per
register block) stay compile-time constants: each variant of those is a compile of the whole pass
(tens of seconds), which the one-minute preparation cannot afford.

`KernelShape` is what a pass takes (a named tuple: numba passes it as three integers); `KNOBS` is
the one registry of what may vary, each with its candidates and the passes it matters to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

KIB = 1024


class KernelShape(NamedTuple):
    """The run-time shape of a pass's matrix kernels (the module docstring)."""

    unit_bytes: int  # weight bytes per work unit the threads claim (the grain of the even finish)
    ahead_bytes: int  # how far ahead of the rows it computes a 1- to 4-row pass hints weights
    tile_bytes: int  # weight bytes of a tile past four x rows (beside a group of x rows in L1)

    def describe(self) -> str:
        return (
            f"unit {self.unit_bytes // KIB} KiB, ahead {self.ahead_bytes // KIB} KiB, "
            f"tile {self.tile_bytes // KIB} KiB"
        )

    def to_json(self) -> dict[str, int]:
        return self._asdict()

    @classmethod
    def from_json(cls, d: object) -> KernelShape:
        """The shape of a `to_json` object; ValueError when it is not one."""
        if not isinstance(d, dict) or set(d) != set(cls._fields):
            raise ValueError(f"not a kernel shape: {d!r}")
        values = [d[f] for f in cls._fields]
        if not all(type(v) is int and v > 0 for v in values):
            raise ValueError(f"kernel shape values must be positive integers: {d!r}")
        return cls(*values)


# 16 KiB units: a few microseconds of work each; 4 KiB ahead (2, 4 and 8 measured alike on the
# AVX-512 host the kernels were shaped on); 32 KiB tiles: an L1 of 32 to 48 KiB. A Gemma-3-1B-sized
# file's one-row passes ran 4-6% faster in 64 and 128 KiB units there (docs/measured.md)
DEFAULT_SHAPE = KernelShape(unit_bytes=16 * KIB, ahead_bytes=4 * KIB, tile_bytes=32 * KIB)

PassRows = Literal["one", "many"]  # one-row passes (decode), or several rows (verify, batch)


@dataclass(frozen=True)
class Knob:
    """One free parameter: a KernelShape field, the values a host may choose from, and the passes
    it changes (a tile exists only past four x rows)."""

    field: str
    values: tuple[int, ...]
    passes: tuple[PassRows, ...]
    help: str


KNOBS: tuple[Knob, ...] = (
    Knob(
        "unit_bytes",
        (8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 128 * KIB),
        ("one", "many"),
        "smaller units finish the threads together; larger ones claim less often",
    ),
    Knob(
        "ahead_bytes",
        (1 * KIB, 2 * KIB, 4 * KIB, 8 * KIB),
        ("one", "many"),
        "how far ahead software prefetches run of the weights being read",
    ),
    Knob(
        "tile_bytes",
        (16 * KIB, 32 * KIB, 64 * KIB),
        ("many",),
        "a tile of weights every group of x rows passes over while it sits in L1",
    ),
)


def knobs_for(passes: PassRows) -> tuple[Knob, ...]:
    """The knobs that change passes of this kind."""
    return tuple(k for k in KNOBS if passes in k.passes)


def variants(shape: KernelShape = DEFAULT_SHAPE) -> list[KernelShape]:
    """`shape` with each knob set to each of its values in turn, the others as in `shape`: every
    value the registry names, each in one shape (the bit-equality tests run them all)."""
    out = [shape]
    for knob in KNOBS:
        for v in knob.values:
            s = shape._replace(**{knob.field: v})
            if s not in out:
                out.append(s)
    return out
