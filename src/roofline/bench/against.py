"""Which ceiling a benchmark is held against, and what to say when a measurement passes it.

1. The server says how many weight bytes it reads per decoded token (the embedded engine's
   `/v1/models` entry carries `"roofline": {"bytes_per_token": ...}`): that byte count over the
   hardware's bandwidth (`--hardware`, `local` by default for `--engine embedded`).
2. Otherwise `--model` and `--hardware` give the ceiling through `roofline.bounds.ceiling.ceiling_for`.
3. Otherwise there is none, and the summary says so.

`local` is this machine, and a run held against it is held against the read bandwidth measured in its
own window (`roofline.hardware.window`: the best of the probe's read kernels right before and right after
the run, the higher of the two), not a profile measured minutes earlier on a machine whose bandwidth
drifts. Other names come from the hardware catalogue; a literal such as `30GB/s` is taken as given.

A measured decode rate above the ceiling means one of its two figures is wrong: the bandwidth (too low)
or the bytes per token (too high). `above_ceiling` names the suspect and says why, and every place that
prints a percentage above 100% prints that explanation beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from roofline.bounds.ceiling import Ceiling
from roofline.hardware.window import BandwidthWindow

LOCAL = "local"
SERVER_BYTES_NOTE = "bytes per token as reported by the server"
_LITERAL = re.compile(r"\s*[0-9.]+(?:[eE][-+]?\d+)?\s*[kKMGTP]?B/s\s*")
# A measured bandwidth can sit this far below what an engine streams (the probe's kernels do not reach every
# CPU's peak); beyond it the bytes per token is the likelier error.
PROBE_SHORTFALL_FRACTION = 0.15

SUSPECT_BANDWIDTH = "bandwidth"
SUSPECT_BYTES = "bytes_per_token"


def hardware_bandwidth_bytes_per_s(hardware: str, gpus: int = 1) -> tuple[float, str]:
    """(bandwidth, where it came from) for `local`, a literal like 8TB/s, or a catalogue name."""
    if _LITERAL.fullmatch(hardware):
        from roofline.units import parse_bytes_per_s

        return parse_bytes_per_s(hardware) * gpus, f"bandwidth given as {hardware.strip()}" + (f" x {gpus}" if gpus > 1 else "")
    from roofline.hardware.catalogue import get_hardware

    hw = get_hardware(hardware, None if gpus == 1 else gpus)  # UserError for unknown names, or no profile
    where = hw.bandwidth_note or (f"{hw.label()}: vendor peak bandwidth" if hw.vendor_claim else hw.label())
    return hw.bandwidth_bytes_per_s, where


def resolve_ceiling(*, model: str | None, hardware: str | None, served: str | None,
                    server_info: dict | None, gpus: int = 1,
                    window: BandwidthWindow | None = None) -> tuple[Ceiling | None, str | None]:
    """(ceiling or None, a note saying why there is none when the user might expect one). With a window
    the hardware is this machine, held against the window's bound."""
    bytes_per_token = (server_info or {}).get("bytes_per_token")
    if window is not None:
        hardware = LOCAL
    if isinstance(bytes_per_token, (int, float)) and bytes_per_token > 0 and hardware:
        if window is not None:
            bw, where = window.bound_bytes_per_s, window.describe()
        else:
            bw, where = hardware_bandwidth_bytes_per_s(hardware, gpus)
        dtype = (server_info or {}).get("dtype")
        return Ceiling(
            bytes_per_token=float(bytes_per_token),
            bandwidth_bytes_per_s=bw,
            model=served or model or "",
            hardware=hardware,
            assumptions=(
                f"{SERVER_BYTES_NOTE} ({dtype or 'dtype not stated'}): weights read per decoded token",
                where,
            ),
        ), None
    if model and hardware:
        from roofline.bounds.ceiling import ceiling_for

        ceiling = ceiling_for(model, hardware, gpus=gpus)
        return (held_against_window(ceiling, window) if window is not None else ceiling), None
    if model or hardware:
        return None, "a ceiling needs both --model and --hardware (or a server that reports its bytes per token)"
    return None, None


def held_against_window(ceiling: Ceiling, window: BandwidthWindow) -> Ceiling:
    """The same bytes per token over the window's bound; the bandwidth line of the assumptions (every
    ceiling has one, starting with "bandwidth") is replaced by the window's."""
    kept = tuple(a for a in ceiling.assumptions if not a.startswith("bandwidth "))
    return replace(ceiling, bandwidth_bytes_per_s=window.bound_bytes_per_s, hardware=LOCAL,
                   assumptions=(*kept, window.describe()))


def bandwidth_source(hardware: str) -> str:
    """How the ceiling's bandwidth was obtained: "measured" (this machine), "given" (a literal), "listed"."""
    if hardware == LOCAL:
        return "measured"
    return "given" if _LITERAL.fullmatch(hardware or "") else "listed"


def bytes_source(ceiling: Ceiling) -> str:
    """Where the bytes per token came from: "engine" (its own count, from the server) or "config" (roofline's)."""
    return "engine" if any(a.startswith(SERVER_BYTES_NOTE) for a in ceiling.assumptions) else "config"


def above_ceiling(percent: float, *, bandwidth_bytes_per_s: float, bytes_per_token: float,
                  bandwidth_from: str, bytes_from: str) -> dict[str, str] | None:
    """None at or below 100%; above it {"suspect": which figure, "note": why}, a pure function.

    The suspect: a bandwidth given by hand; the probe's measured bandwidth when the engine beats it by
    up to PROBE_SHORTFALL_FRACTION (no probe kernel reaches every CPU's peak); otherwise the bytes per
    token (beyond that margin, or against a listed figure, the engine most likely reads fewer bytes than
    counted: weights held in cache, a smaller format than stated, or work skipped)."""
    if percent <= 100.0:
        return None
    effective = bandwidth_bytes_per_s * percent / 100.0
    excess = percent / 100.0 - 1.0
    streamed = (f"the engine's rate implies {effective / 1e9:.1f} GB/s streamed at {bytes_per_token / 1e6:.1f} MB per "
                f"token, {100 * excess:.0f}% more than the ceiling's {bandwidth_bytes_per_s / 1e9:.1f} GB/s")
    counted = "reported by the engine" if bytes_from == "engine" else "counted from the model's config"
    if bandwidth_from == "given":
        suspect, why = SUSPECT_BANDWIDTH, ("the bandwidth given on the command line is the suspect: the hardware delivers "
                                           "more than that")
    elif bandwidth_from == "measured" and excess <= PROBE_SHORTFALL_FRACTION:
        suspect, why = SUSPECT_BANDWIDTH, ("the probe's measured bandwidth is the suspect: its read kernels fell short of "
                                           "what the engine's own access pattern reaches on this CPU (or the machine was "
                                           "busier while the probe ran); the bytes per token are not")
    else:
        where = (f"no probe kernel came within {100 * PROBE_SHORTFALL_FRACTION:.0f}% of that" if bandwidth_from == "measured"
                 else "the bandwidth is a listed figure")
        suspect, why = SUSPECT_BYTES, (f"the {bytes_per_token / 1e6:.1f} MB per token {counted} is the suspect ({where}): "
                                       "the engine likely reads fewer bytes per token (weights held in cache, a smaller "
                                       "format than stated, or layers skipped)")
    return {"suspect": suspect, "note": f"above 100%: {streamed}; {why}"}


def ceiling_excess(ceiling: Ceiling, percent: float) -> dict[str, str] | None:
    """`above_ceiling` for a Ceiling object."""
    return above_ceiling(percent, bandwidth_bytes_per_s=ceiling.bandwidth_bytes_per_s,
                         bytes_per_token=ceiling.bytes_per_token, bandwidth_from=bandwidth_source(ceiling.hardware),
                         bytes_from=bytes_source(ceiling))


def percent_text(v: Any) -> str:
    """A "% of ceiling" cell from a summary's vs_ceiling (a mapping or `bench.summary.VsCeiling`): "-" without
    one, "87.3%", or above 100% the suspect figure beside the number."""
    def get(name: str) -> Any:
        return v.get(name) if isinstance(v, Mapping) else getattr(v, name, None)

    pct = get("percent_of_ceiling") if v is not None else None
    if pct is None:
        return "-"
    if pct > 100.0:
        return f"{pct:.1f}% ({'bandwidth' if get('suspect') == SUSPECT_BANDWIDTH else 'bytes/token'} suspect, see note)"
    return f"{pct:.1f}%"


def local_decode_vs_ceiling(*, bytes_per_token: float, tok_per_s: float, passes_per_s: float | None,
                            window: BandwidthWindow) -> dict[str, Any]:
    """A decode rate on this machine held against its bandwidth window (what `roofline generate` prints).
    With speculation (more than one token per weight pass) passes/s is held against it, as bench does."""
    ceiling_tok_per_s = window.bound_bytes_per_s / bytes_per_token
    spec = passes_per_s is not None and passes_per_s > 0 and tok_per_s > passes_per_s * 1.0001
    rate = passes_per_s if spec else tok_per_s
    pct = 100.0 * rate / ceiling_tok_per_s
    d: dict[str, Any] = {"ceiling_tok_per_s": ceiling_tok_per_s, "bandwidth_bytes_per_s": window.bound_bytes_per_s,
                         "basis": "passes" if spec else "tokens", "percent_of_ceiling": pct,
                         "local_bandwidth": window.to_json()}
    d.update(above_ceiling(pct, bandwidth_bytes_per_s=window.bound_bytes_per_s, bytes_per_token=bytes_per_token,
                           bandwidth_from="measured", bytes_from="engine") or {})
    return d
