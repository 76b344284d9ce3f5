"""Which ceiling a benchmark is held against, and what to say when a measurement passes it.

1. The server reports its weight bytes per decoded token (the embedded engine's `/v1/models`
   entry: `"roofline": {"bytes_per_token": ...}`): those bytes over `--hardware`'s bandwidth.
2. Else `--model` and `--hardware` give it (`roofline.bounds.analysis.ceiling_for`).
3. Else there is none, and the summary says so.

`local` is the read bandwidth of the run's own window (`roofline.hardware.window`: a machine
drifts); a literal such as `30GB/s` is taken as given. The file's bytes per token ride along
(`Ceiling.file_bytes_per_token`), so an engine that widens a 4-bit file is also shown against what
it must read. A rate above the ceiling means the bandwidth is too low or the bytes too high:
`above_ceiling` names the suspect, printed beside every percentage above 100%.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from roofline.bounds.ceiling import Ceiling
from roofline.errors import UserError
from roofline.hardware.window import BandwidthWindow
from roofline.response_stats import ServerStats

LOCAL = "local"
SERVER_BYTES_NOTE = "bytes per token as reported by the server"
_LITERAL = re.compile(r"\s*[0-9.]+(?:[eE][-+]?\d+)?\s*[kKMGTP]?B/s\s*")
# A measured bandwidth can sit this far below what an engine streams (the probe's kernels do not
# reach every CPU's peak); beyond it the bytes per token is the likelier error.
PROBE_SHORTFALL_FRACTION = 0.15

SUSPECT_BANDWIDTH = "bandwidth"
SUSPECT_BYTES = "bytes_per_token"


def hardware_bandwidth_bytes_per_s(hardware: str, gpus: int = 1) -> tuple[float, str]:
    """(bandwidth, where it came from) for `local`, a literal like 8TB/s, or a catalogue name."""
    if _LITERAL.fullmatch(hardware):
        from roofline.units import parse_bytes_per_s

        return parse_bytes_per_s(hardware) * gpus, f"bandwidth given as {hardware.strip()}" + (
            f" x {gpus}" if gpus > 1 else ""
        )
    from roofline.hardware.catalogue import get_hardware

    # UserError for unknown names, or no profile
    hw = get_hardware(hardware, None if gpus == 1 else gpus)
    where = hw.bandwidth_note or (
        f"{hw.label()}: vendor peak bandwidth" if hw.vendor_claim else hw.label()
    )
    return hw.bandwidth_bytes_per_s, where


_MAX_BYTES_PER_TOKEN = 1e15  # a petabyte per token: anything above is not a model's weights


def plausible_bytes(value: Any) -> float | None:
    """A byte count from a server's JSON when it is a positive finite number of plausible size, else
    None."""
    if value.__class__ not in (int, float):  # bool is not a byte count
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return value if math.isfinite(value) and 0 < value <= _MAX_BYTES_PER_TOKEN else None


def file_bytes_of_model(model: str | None) -> tuple[int | None, str | None]:
    """(the weight bytes per decoded token of a local model file or folder as stored, a note when
    they could not be counted). (None, None) when `model` is no local path (a hub name, or
    nothing)."""
    if not model:
        return None, None
    from pathlib import Path

    path = Path(model).expanduser()
    if path.is_file():
        weights = path.suffix in (".gguf", ".safetensors")
    else:
        weights = path.is_dir() and (any(path.glob("*.safetensors")) or any(path.glob("*.gguf")))
    if not weights:  # a hub name, a config.json or its folder: nothing stored to count
        return None, None
    try:
        from roofline.modelspec.files import file_weight_bytes_per_token
    except ImportError:
        return (
            None,
            f"the file's bytes per token of {path.name} are not counted (this roofline cannot "
            "read model files)",
        )
    try:
        return int(file_weight_bytes_per_token(str(path))), None
    except (UserError, OSError, ValueError, KeyError) as e:
        return None, f"the file's bytes per token of {path.name} could not be counted: {e}"


def file_bytes_note(file_bytes_per_token: float, source: str) -> str:
    """The assumption line of the file's figure (never starts with "bandwidth" or
    SERVER_BYTES_NOTE)."""
    return (
        f"file: {file_bytes_per_token / 1e6:,.1f} MB per token, the weights as the model's file "
        f"stores them ({source}), the same count: every weight once, one row of the embedding "
        "table"
    )


def with_file_bytes(ceiling: Ceiling, file_bytes_per_token: float | None, source: str) -> Ceiling:
    """The ceiling carrying the file's bytes per token (unchanged when they are not known)."""
    if not file_bytes_per_token:
        return ceiling
    return replace(
        ceiling,
        file_bytes_per_token=float(file_bytes_per_token),
        assumptions=(*ceiling.assumptions, file_bytes_note(file_bytes_per_token, source)),
    )


def resolve_ceiling(
    *,
    model: str | None,
    hardware: str | None,
    served: str | None,
    server_info: Mapping[str, Any] | None,
    gpus: int = 1,
    window: BandwidthWindow | None = None,
    model_file: str | None = None,
) -> tuple[Ceiling | None, str | None]:
    """(ceiling or None, a note saying why there is none when the user might expect one). With a
    window the hardware is this machine, held against the window's bound. The file's bytes per token
    come from the server's entry, else from `model_file` (the launcher's model argument) when it is
    a local path."""
    stats = ServerStats.from_json(server_info) or ServerStats()
    bytes_per_token = stats.bytes_per_token
    file_bytes = plausible_bytes(stats.file_bytes_per_token)
    file_source, file_note = "from the server's /v1/models entry", None
    if file_bytes is None and model_file:
        counted, file_note = file_bytes_of_model(model_file)
        file_bytes, file_source = counted, f"counted from {model_file}"
    if window is not None:
        hardware = LOCAL
    if bytes_per_token is not None and bytes_per_token > 0 and hardware:
        if window is not None:
            bw, where = window.bound_bytes_per_s, window.describe()
        else:
            bw, where = hardware_bandwidth_bytes_per_s(hardware, gpus)
        dtype = stats.dtype
        return with_file_bytes(
            Ceiling(
                bytes_per_token=float(bytes_per_token),
                bandwidth_bytes_per_s=bw,
                model=served or model or "",
                hardware=hardware,
                assumptions=(
                    f"{SERVER_BYTES_NOTE} ({dtype or 'dtype not stated'}): weights read per "
                    "decoded token",
                    where,
                ),
            ),
            file_bytes,
            file_source,
        ), file_note
    if model and hardware:
        from roofline.bounds.analysis import ceiling_for

        ceiling = ceiling_for(model, hardware, gpus=gpus)
        ceiling = with_file_bytes(ceiling, file_bytes, file_source)
        return (held_against_window(ceiling, window) if window is not None else ceiling), file_note
    if model or hardware:
        return (
            None,
            "a ceiling needs both --model and --hardware (or a server that reports its bytes per "
            "token)",
        )
    return None, None


def held_against_window(ceiling: Ceiling, window: BandwidthWindow) -> Ceiling:
    """The same bytes per token over the window's bound; the bandwidth line of the assumptions
    (every ceiling has one, starting with "bandwidth") is replaced by the window's."""
    kept = tuple(a for a in ceiling.assumptions if not a.startswith("bandwidth "))
    return replace(
        ceiling,
        bandwidth_bytes_per_s=window.bound_bytes_per_s,
        hardware=LOCAL,
        assumptions=(*kept, window.describe()),
    )


def bandwidth_source(hardware: str) -> str:
    """How the ceiling's bandwidth was obtained: "measured" (this machine), "given" (a literal),
    "listed"."""
    if hardware == LOCAL:
        return "measured"
    return "given" if _LITERAL.fullmatch(hardware or "") else "listed"


def bytes_source(ceiling: Ceiling) -> str:
    """Where the bytes per token came from: "engine" (its own count, from the server) or "config"
    (roofline's)."""
    return (
        "engine" if any(a.startswith(SERVER_BYTES_NOTE) for a in ceiling.assumptions) else "config"
    )


def above_ceiling(
    percent: float,
    *,
    bandwidth_bytes_per_s: float,
    bytes_per_token: float,
    bandwidth_from: str,
    bytes_from: str,
) -> dict[str, str] | None:
    """None at or below 100%; above it {"suspect": which figure, "note": why}, a pure function.

    The suspect: a bandwidth given by hand; the probe's measured bandwidth when the engine beats it
    by up to PROBE_SHORTFALL_FRACTION (no probe kernel reaches every CPU's peak); otherwise the
    bytes per token (beyond that margin, or against a listed figure, the engine most likely reads
    fewer bytes than counted: weights held in cache, a smaller format than stated, or work
    skipped)."""
    if percent <= 100.0:
        return None
    effective = bandwidth_bytes_per_s * percent / 100.0
    excess = percent / 100.0 - 1.0
    streamed = (
        f"the engine's rate implies {effective / 1e9:.1f} GB/s streamed at "
        f"{bytes_per_token / 1e6:.1f} MB per token, {100 * excess:.0f}% more than the ceiling's "
        f"{bandwidth_bytes_per_s / 1e9:.1f} GB/s"
    )
    counted = (
        "reported by the engine" if bytes_from == "engine" else "counted from the model's config"
    )
    if bandwidth_from == "given":
        suspect, why = (
            SUSPECT_BANDWIDTH,
            (
                "the bandwidth given on the command line is the suspect: the hardware delivers "
                "more than that"
            ),
        )
    elif bandwidth_from == "measured" and excess <= PROBE_SHORTFALL_FRACTION:
        suspect, why = (
            SUSPECT_BANDWIDTH,
            (
                "the probe's measured bandwidth is the suspect: its read kernels fell short of "
                "what the engine's own access pattern reaches on this CPU (or the machine was "
                "busier while the probe ran); the bytes per token are not"
            ),
        )
    else:
        where = (
            f"no probe kernel came within {100 * PROBE_SHORTFALL_FRACTION:.0f}% of that"
            if bandwidth_from == "measured"
            else "the bandwidth is a listed figure"
        )
        suspect, why = (
            SUSPECT_BYTES,
            (
                f"the {bytes_per_token / 1e6:.1f} MB per token {counted} is the suspect ({where}): "
                "the engine likely reads fewer bytes per token (weights held in cache, a smaller "
                "format than stated, or layers skipped)"
            ),
        )
    return {"suspect": suspect, "note": f"above 100%: {streamed}; {why}"}


def ceiling_excess(ceiling: Ceiling, percent: float) -> dict[str, str] | None:
    """`above_ceiling` for a Ceiling object."""
    return above_ceiling(
        percent,
        bandwidth_bytes_per_s=ceiling.bandwidth_bytes_per_s,
        bytes_per_token=ceiling.bytes_per_token,
        bandwidth_from=bandwidth_source(ceiling.hardware),
        bytes_from=bytes_source(ceiling),
    )


def percent_text(v: Any) -> str:
    """A "% of ceiling" cell from a summary's vs_ceiling (a mapping or `bench.summary.VsCeiling`):
    "-" without one, "87.3%", or above 100% the suspect figure beside the number."""

    def get(name: str) -> Any:
        return v.get(name) if isinstance(v, Mapping) else getattr(v, name, None)

    pct = get("percent_of_ceiling") if v is not None else None
    if pct is None:
        return "-"
    if pct > 100.0:
        return (
            f"{pct:.1f}% ({'bandwidth' if get('suspect') == SUSPECT_BANDWIDTH else 'bytes/token'} "
            "suspect, see note)"
        )
    return f"{pct:.1f}%"


# Within this factor either way the engine reads what the file stores; beyond it the summary says
# so.
READ_RATIO_NOTE = 1.05


def read_ratio_line(
    bytes_per_token: float,
    file_bytes_per_token: float | None,
    percent_of_file_ceiling: float | None,
) -> str | None:
    """One line when the engine reads more (or fewer) bytes per token than the file stores, beyond
    READ_RATIO_NOTE: "the engine reads E MB per token, Rx the file's F MB: measured against the
    file, P% of ceiling". None when the file's figure is unknown or the two agree."""
    if not file_bytes_per_token or not bytes_per_token:
        return None
    ratio = bytes_per_token / file_bytes_per_token
    if 1 / READ_RATIO_NOTE <= ratio <= READ_RATIO_NOTE:
        return None
    smaller = "" if ratio > 1 else " (it runs a smaller format than the file stores)"
    against = (
        ""
        if percent_of_file_ceiling is None
        else f": measured against the file, {percent_of_file_ceiling:.0f}% of ceiling"
    )
    return (
        f"the engine reads {bytes_per_token / 1e6:,.1f} MB per token, {ratio:.2f}x the file's "
        f"{file_bytes_per_token / 1e6:,.1f} MB{smaller}{against}"
    )


def local_decode_vs_ceiling(
    *,
    bytes_per_token: float,
    tok_per_s: float,
    passes_per_s: float | None,
    window: BandwidthWindow,
    file_bytes_per_token: float | None = None,
) -> dict[str, Any]:
    """A decode rate on this machine held against its bandwidth window (what `roofline generate`
    prints). With speculation (more than one token per weight pass) passes/s is held against it, as
    bench does. With the file's bytes per token, the same rate against the file's ceiling too."""
    ceiling_tok_per_s = window.bound_bytes_per_s / bytes_per_token
    spec = passes_per_s is not None and passes_per_s > 0 and tok_per_s > passes_per_s * 1.0001
    rate = passes_per_s if spec else tok_per_s
    pct = 100.0 * rate / ceiling_tok_per_s
    d: dict[str, Any] = {
        "ceiling_tok_per_s": ceiling_tok_per_s,
        "bandwidth_bytes_per_s": window.bound_bytes_per_s,
        "basis": "passes" if spec else "tokens",
        "percent_of_ceiling": pct,
        "local_bandwidth": window.to_json(),
    }
    if file_bytes_per_token:
        file_ceiling = window.bound_bytes_per_s / file_bytes_per_token
        d.update(
            file_bytes_per_token=file_bytes_per_token,
            file_ceiling_tok_per_s=file_ceiling,
            percent_of_file_ceiling=100.0 * rate / file_ceiling,
            read_ratio=bytes_per_token / file_bytes_per_token,
        )
    d.update(
        above_ceiling(
            pct,
            bandwidth_bytes_per_s=window.bound_bytes_per_s,
            bytes_per_token=bytes_per_token,
            bandwidth_from="measured",
            bytes_from="engine",
        )
        or {}
    )
    return d
