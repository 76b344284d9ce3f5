"""Which ceiling a benchmark is held against.

1. The server says how many weight bytes it reads per decoded token (the embedded engine's
   `/v1/models` entry carries `"roofline": {"bytes_per_token": ...}`): that byte count over the
   hardware's bandwidth (`--hardware`, `local` by default for `--engine embedded`).
2. Otherwise `--model` and `--hardware` give the ceiling through `roofline.bounds.ceiling.ceiling_for`.
3. Otherwise there is none, and the summary says so.

`local` is this machine's measured profile (`roofline probe`), read bandwidth, median of its runs;
other names come from the hardware catalogue; a literal such as `30GB/s` is taken as given.
"""

from __future__ import annotations

import re

from roofline.bounds.ceiling import Ceiling


def hardware_bandwidth_bytes_per_s(hardware: str, gpus: int = 1) -> tuple[float, str]:
    """(bandwidth, where it came from) for `local`, a literal like 8TB/s, or a catalogue name."""
    if re.fullmatch(r"\s*[0-9.]+(?:[eE][-+]?\d+)?\s*[kKMGTP]?B/s\s*", hardware):
        from roofline.units import parse_bytes_per_s

        return parse_bytes_per_s(hardware) * gpus, f"bandwidth given as {hardware.strip()}" + (f" x {gpus}" if gpus > 1 else "")
    from roofline.hardware.catalogue import get_hardware

    hw = get_hardware(hardware, None if gpus == 1 else gpus)  # UserError for unknown names, or no profile
    where = hw.bandwidth_note or (f"{hw.label()}: vendor peak bandwidth" if hw.vendor_claim else hw.label())
    return hw.bandwidth_bytes_per_s, where


def resolve_ceiling(*, model: str | None, hardware: str | None, served: str | None,
                    server_info: dict | None, gpus: int = 1) -> tuple[Ceiling | None, str | None]:
    """(ceiling or None, a note saying why there is none when the user might expect one)."""
    bytes_per_token = (server_info or {}).get("bytes_per_token")
    if isinstance(bytes_per_token, (int, float)) and bytes_per_token > 0 and hardware:
        bw, where = hardware_bandwidth_bytes_per_s(hardware, gpus)
        dtype = (server_info or {}).get("dtype")
        return Ceiling(
            bytes_per_token=float(bytes_per_token),
            bandwidth_bytes_per_s=bw,
            model=served or model or "",
            hardware=hardware,
            assumptions=(
                f"bytes per token as reported by the server ({dtype or 'dtype not stated'}): weights read per decoded token",
                where,
            ),
        ), None
    if model and hardware:
        from roofline.bounds.ceiling import ceiling_for

        return ceiling_for(model, hardware, gpus=gpus), None
    if model or hardware:
        return None, "a ceiling needs both --model and --hardware (or a server that reports its bytes per token)"
    return None, None
