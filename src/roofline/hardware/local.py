"""`--hardware local`: this machine, from the profile `roofline probe` measured and saved.

Bandwidth is the best measured read pass over the probe's read kernels (a bound, as STREAM's best
rate is; see `roofline.hardware.readbw`), with the typical (median) rate and the spread in the
assumptions so they are never hidden; profiles written before the probe kept a best fall back to
their median. When a run window (the short probe before and after each bench, tune or generate run)
measured more than the probe did, the profile's `best_read` holds that rate, and it is the
bandwidth, with when and by what it was measured: a probe taken in a slow minute never puts the
ceiling below what the machine has shown. Memory is the machine's RAM, and the dense FLOP/s per
dtype are the medians of the matrix-matrix runs.
"""

from __future__ import annotations

from typing import Any

from roofline.errors import UserError
from roofline.hardware.figures import Hardware
from roofline.hardware.profile import best_read, positive_median

_FLOPS_KERNELS = {"matmul_fp32": "fp32", "matmul_bf16": "bf16", "matmul_fp16": "fp16"}


def _gb_per_s(v: Any) -> str:
    return f"{v / 1e9:.1f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def hardware_from_profile(profile: dict[str, Any]) -> Hardware:
    """Hardware built from a measured profile (the JSON that `roofline probe` writes)."""
    bw = profile.get("bandwidth_bytes_per_s")
    read = bw.get("read") if isinstance(bw, dict) else None
    typical = positive_median(read)
    best = read.get("best") if isinstance(read, dict) else None
    has_best = isinstance(best, (int, float)) and not isinstance(best, bool) and best > 0
    bandwidth = float(best) if has_best else typical
    if bandwidth is None:
        raise UserError(
            "the measured profile has no positive read bandwidth; re-run `roofline probe`"
        )
    top = best_read(profile)
    # a window's, or an earlier probe's
    raised = top is not None and float(top["bytes_per_s"]) > bandwidth
    memory = profile.get("memory_bytes")
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not memory > 0:
        raise UserError("the measured profile has no memory size; re-run `roofline probe`")
    flops_in = profile.get("flops") if isinstance(profile.get("flops"), dict) else {}
    flops = {
        dtype: m
        for kernel, dtype in _FLOPS_KERNELS.items()
        if (m := positive_median(flops_in.get(kernel)))
    }
    runs = read.get("runs")
    n = f", {len(runs)} runs" if isinstance(runs, list) else ""
    spread = f"min {_gb_per_s(read.get('min'))}, max {_gb_per_s(read.get('max'))} GB/s{n}"
    if has_best:
        kernels = read.get("kernels") if isinstance(read.get("kernels"), dict) else {}
        how = (
            f"measured read bandwidth, best pass of {len(kernels) or 'the'} read kernels "
            f"({read.get('kernel', '?')}); typical (median) {_gb_per_s(typical)} GB/s; {spread}"
        )
    else:
        how = f"measured read bandwidth, median; {spread}"
    when = str(profile.get("measured_at", "?"))
    source = f"measured by `roofline probe` at {when}"
    # a run window (or an earlier probe) measured more: the bound is what the machine has shown
    if raised:
        kernel = f" ({top['kernel']})" if top.get("kernel") else ""
        how = (
            f"best read bandwidth measured on this machine: {_gb_per_s(top['bytes_per_s'])} GB/s "
            f"by {top['by']}{kernel} at {top['measured_at']}, "
            f"above the probe's {_gb_per_s(bandwidth)} GB/s at {when}; the probe's {how}"
        )
        source = f"{source}; best read rate by {top['by']} at {top['measured_at']}"
        bandwidth = float(top["bytes_per_s"])
    threads = profile.get("threads")
    cpu = str(profile.get("cpu", "this machine"))
    return Hardware(
        key="local",
        name=f"{cpu}" + (f", {threads} threads" if threads else ""),
        devices=1,
        bandwidth_bytes_per_s=bandwidth,
        memory_bytes=float(memory),
        flops=flops,
        interconnect="none (one machine)",
        source=source,
        read=when,
        vendor_claim=False,
        measured=True,
        bandwidth_note=how,
    )


def local_hardware() -> Hardware:
    """This machine's measured figures; a clear error when `roofline probe` has not been run."""
    from roofline.hardware import profile  # the probe's module: where the profile lives

    data = profile.load_local_profile()
    if data is None:
        raise UserError("no measured profile for this machine yet; run `roofline probe` first")
    return hardware_from_profile(data)
