"""The precisions the embedded engine holds its weight matrices in: one registry with their traits.

`roofline serve --dtype` / `generate --dtype`, the draft copy's `--spec-draft-dtype` and the
embedded launcher's `dtype` knob all read this table, so adding a precision is one entry here (and
its packing in the engine). Stdlib only: the CLI's help and bench's knob table read it without
loading numpy or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How the engine packs a precision's weight matrices:
#   stored    the file's rows as it stores them, widened in registers by the stored kernels
#   expanded  every weight dequantized at load, handed to the stored kernels as F32 rows
#   matrix    converted to a matrix of the precision's own storage (`engine.loading.weights`)
Packing = Literal["stored", "expanded", "matrix"]


@dataclass(frozen=True)
class Dtype:
    name: str
    # the matrices hold the file's values unchanged, so greedy output equals the file's own
    # (stored widens each block in registers to the fp32 a full expansion gives); a lossy one
    # rounds them and its output may differ
    exact: bool
    description: str  # one line, for help texts
    # bits a weight matrix's value takes (int8's float32 row scale not counted: 4 bytes a row of
    # hundreds); None: the file's own formats
    bits_per_weight: float | None
    packing: Packing

    @property
    def lossy(self) -> bool:
        return not self.exact


DTYPES: dict[str, Dtype] = {
    d.name: d
    for d in (
        Dtype(
            "stored", True, "each row as the file stores it, widened in registers", None, "stored"
        ),
        Dtype("fp32", True, "float32, every weight expanded: the reference", 32.0, "expanded"),
        Dtype(
            "bf16", False, "bf16, rounded to nearest even from the file's values", 16.0, "matrix"
        ),
        Dtype("int8", False, "int8, weight-only, one float32 scale per output row", 8.0, "matrix"),
    )
}
DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)


def choices_help() -> str:
    """Each precision in one line of help: its name, what it holds, and whether it is lossy."""
    return "; ".join(
        f"{d.name} ({d.description}{', lossy' if d.lossy else ''})" for d in DTYPES.values()
    )
