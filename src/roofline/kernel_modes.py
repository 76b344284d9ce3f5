"""`--kernels`: which run-time shapes the engine's matrix kernels take (`engine/kernels/
kernel_shapes`). The CLI's flag, the embedded launcher's knob and the engine read these."""

from __future__ import annotations

from typing import Literal

KernelsMode = Literal["measured", "default"]
KERNELS_MODES: tuple[KernelsMode, ...] = ("measured", "default")
DEFAULT_KERNELS_MODE: KernelsMode = "measured"
KERNELS_HELP = (
    "Kernel shapes (work-unit size, prefetch distance, tile size): measured (the fastest on this "
    "CPU for this model, timed in seconds at the first start or --prepare and kept in the user "
    "cache) or default (the shapes the kernels were tuned with). Output bits are the same in any "
    "shape."
)
