"""The hardware catalogue (data/hardware.toml) and `get_hardware`: a name (or 'local') -> Hardware.

Names resolve case-insensitively by key or alias; '8xh100' means eight H100s. Figures scale linearly
with the device count: N devices have N x the bandwidth, memory and FLOP/s of one (the ideal that
the tensor-parallel bound then corrects with all-reduce latency).
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from typing import Any

from roofline.errors import UserError
from roofline.hardware.figures import Hardware
from roofline.hardware.local import local_hardware


def _positive(entry: dict[str, Any], key: str, where: str) -> float:
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise UserError(f"hardware entry {where!r}: {key} must be a positive number (got {v!r})")
    return float(v)


def hardware_from_entry(key: str, entry: dict[str, Any]) -> Hardware:
    """Build one Hardware from its table; bad figures are a UserError naming the entry."""
    devices = entry.get("devices", 1)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise UserError(f"hardware entry {key!r}: devices must be a whole number >= 1")
    flops = entry.get("flops", {})
    if not isinstance(flops, dict) or any(
        not isinstance(v, (int, float)) or v <= 0 for v in flops.values()
    ):
        raise UserError(f"hardware entry {key!r}: flops must map dtypes to positive FLOP/s")
    vendor = bool(entry.get("vendor_claim", True))
    return Hardware(
        key=key,
        name=str(entry.get("name", key)),
        devices=devices,
        bandwidth_bytes_per_s=_positive(entry, "bandwidth_bytes_per_s", key),
        memory_bytes=_positive(entry, "memory_bytes", key),
        flops={str(k): float(v) for k, v in flops.items()},
        interconnect=str(entry.get("interconnect", "")),
        interconnect_bytes_per_s=entry.get("interconnect_bytes_per_s"),
        source=str(entry.get("source", "")),
        read=str(entry.get("read", "")),
        vendor_claim=vendor,
        unit_devices=devices,
        bandwidth_note="vendor peak" if vendor else "catalogue figure",
        notes=tuple(entry.get("notes", ())),
    )


def _catalogue() -> dict[str, dict[str, Any]]:
    text = (resources.files("roofline") / "data" / "hardware.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def catalogue_hardware() -> list[Hardware]:
    return [hardware_from_entry(k, v) for k, v in _catalogue().items()]


def _lookup(name: str) -> tuple[str, dict[str, Any]] | None:
    key = name.strip().lower()
    for k, entry in _catalogue().items():
        if key == k or key in (str(a).lower() for a in entry.get("aliases", ())):
            return k, entry
    return None


def get_hardware(name: str, gpus: int | None = None) -> Hardware:
    """Catalogue hardware (or 'local', the profile `roofline probe` measured), scaled to `gpus`
    devices.

    `gpus` None keeps the entry's own count (1 for a card, 72 for an NVL72 rack); a name such as
    '8xh100' or '8x-h100' sets the count too.
    """
    text = str(name).strip()
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise UserError(f"--gpus must be a whole number >= 1 (got {gpus!r})")
    m = re.fullmatch(r"(\d+)\s*[x×]\s*-?(.+)", text, flags=re.IGNORECASE)
    if m and int(m.group(1)) >= 1:
        count = int(m.group(1))
        if gpus is not None and gpus != count:
            raise UserError(f"{text!r} names {count} devices but --gpus says {gpus}; give one")
        gpus, text = count, m.group(2)
    if text.lower() == "local":
        hw = local_hardware()
        if gpus not in (None, 1):
            raise UserError("--hardware local describes this one machine; drop --gpus")
        return hw
    found = _lookup(text)
    if found is None:
        known = ", ".join(sorted(_catalogue()))
        raise UserError(
            f"unknown hardware {name!r}; use one of: {known}, local (see `roofline hardware list`)"
        )
    hw = hardware_from_entry(*found)
    return hw.scaled(gpus) if gpus is not None else hw
