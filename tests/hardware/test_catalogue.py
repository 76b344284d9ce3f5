"""The hardware catalogue: every entry sourced and dated, names resolve, figures scale, 'local' is
measured."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from roofline.errors import UserError
from roofline.hardware import local as local_mod
from roofline.hardware import profile as profile_mod
from roofline.hardware.catalogue import (
    catalogue_hardware,
    get_hardware,
    hardware_from_entry,
)

REQUIRED = [
    "h100-sxm",
    "h200",
    "b200",
    "gb200-nvl72",
    "a100-80gb",
    "l40s",
    "mi300x",
    "mi325x",
    "mi355x",
    "cerebras-wse-3",
    "groq-lpx",
    "sambanova-sn40l",
]


def _profile(read_median: float = 3.1e10) -> dict:
    def stats(m: float) -> dict:
        return {"median": m, "min": m * 0.9, "max": m * 1.05, "runs": [m * 0.9, m, m * 1.05]}

    return {
        "name": "local",
        "measured_at": "2026-11-29T10:00:00Z",
        "cpu": "Test CPU",
        "threads": 2,
        "memory_bytes": 25_000_000_000,
        "bandwidth_bytes_per_s": {
            "read": stats(read_median),
            "copy": stats(2.4e10),
            "triad": stats(2.2e10),
        },
        "flops": {
            "matvec_fp32": stats(5e9),
            "matmul_fp32": stats(1.85e11),
            "matmul_bf16": stats(4.18e11),
        },
    }


def test_every_entry_has_figures_source_date_and_flag() -> None:
    raw = tomllib.loads((resources.files("roofline") / "data" / "hardware.toml").read_text("utf-8"))
    assert set(REQUIRED) <= set(raw)
    for key, entry in raw.items():
        for field in (
            "name",
            "bandwidth_bytes_per_s",
            "memory_bytes",
            "flops",
            "interconnect",
            "source",
            "read",
            "vendor_claim",
        ):
            assert field in entry, (key, field)
        assert entry["flops"], key
    assert all(h.vendor_claim for h in catalogue_hardware())


def test_brief_figures() -> None:
    h100 = get_hardware("h100-sxm")
    assert (h100.bandwidth_bytes_per_s, h100.memory_bytes, h100.flops["fp8"]) == (
        3.35e12,
        80e9,
        1979e12,
    )
    assert (get_hardware("h200").bandwidth_bytes_per_s, get_hardware("h200").memory_bytes) == (
        4.8e12,
        141e9,
    )
    assert get_hardware("b200").bandwidth_bytes_per_s == 8e12
    nvl = get_hardware("gb200-nvl72")
    assert (nvl.devices, nvl.bandwidth_bytes_per_s, nvl.memory_bytes) == (72, 576e12, 13.4e12)
    assert nvl.per_device_bandwidth_bytes_per_s == 8e12 and nvl.flops["fp4"] == 720e15
    wse = get_hardware("cerebras-wse-3")
    assert (wse.memory_bytes, wse.bandwidth_bytes_per_s) == (44e9, 21e15)
    groq = get_hardware("groq-lpx")
    assert (groq.memory_bytes, groq.bandwidth_bytes_per_s, groq.flops["fp8"]) == (
        128e9,
        40e15,
        315e15,
    )
    sn = get_hardware("sn40l")
    assert (
        sn.bandwidth_bytes_per_s == 1.8e12
        and sn.memory_bytes == 64 * 2**30
        and sn.flops["bf16"] == 638e12
    )


def test_names_aliases_and_counts() -> None:
    assert get_hardware("H100").key == "h100-sxm" and get_hardware("NVL72").key == "gb200-nvl72"
    eight = get_hardware("h100-sxm", gpus=8)
    assert (eight.devices, eight.bandwidth_bytes_per_s, eight.memory_bytes) == (8, 26.8e12, 640e9)
    assert eight.flops["fp8"] == 8 * 1979e12 and eight.label().startswith("8 x ")
    assert get_hardware("8xh200").memory_bytes == 1128e9
    part = get_hardware("gb200-nvl72", gpus=8)
    assert part.bandwidth_bytes_per_s == pytest.approx(64e12) and "8 of 72" in part.label()


@pytest.mark.parametrize(
    "name, gpus, match",
    [
        ("h900", None, "unknown hardware"),
        ("h100", 0, "--gpus"),
        ("8xh100", 4, "names 8 devices"),
    ],
)
def test_bad_names(name: str, gpus, match: str) -> None:
    with pytest.raises(UserError, match=match):
        get_hardware(name, gpus)


def test_bad_entries_are_user_errors() -> None:
    with pytest.raises(UserError, match="bandwidth"):
        hardware_from_entry("x", {"bandwidth_bytes_per_s": 0, "memory_bytes": 1e9, "flops": {}})
    with pytest.raises(UserError, match="memory"):
        hardware_from_entry("x", {"bandwidth_bytes_per_s": 1e9, "memory_bytes": -1, "flops": {}})


def test_local_uses_the_measured_profile(monkeypatch) -> None:
    monkeypatch.setattr(profile_mod, "load_local_profile", lambda: _profile())
    hw = get_hardware("local")
    assert hw.measured and not hw.vendor_claim
    assert hw.bandwidth_bytes_per_s == 3.1e10 and hw.memory_bytes == 25e9
    assert hw.flops == {"fp32": 1.85e11, "bf16": 4.18e11}
    assert (
        "measured" in hw.bandwidth_note
        and "min 27.9" in hw.bandwidth_note
        and "3 runs" in hw.bandwidth_note
    )
    with pytest.raises(UserError, match="drop --gpus"):
        get_hardware("local", gpus=2)


def test_local_without_a_profile(monkeypatch) -> None:
    monkeypatch.setattr(profile_mod, "load_local_profile", lambda: None)
    with pytest.raises(UserError, match="run `roofline probe`"):
        get_hardware("local")


def test_local_from_the_saved_file(monkeypatch, tmp_path) -> None:
    # The real path: the probe's module reads $ROOFLINE_CACHE_DIR/hardware/local.json.
    monkeypatch.setenv(profile_mod.CACHE_DIR_ENV, str(tmp_path))
    with pytest.raises(UserError, match="roofline probe"):
        get_hardware("local")
    profile_mod.save_profile(_profile(2.5e10))
    assert get_hardware("local").bandwidth_bytes_per_s == 2.5e10


def test_profile_with_zero_bandwidth_is_refused() -> None:
    bad = _profile()
    bad["bandwidth_bytes_per_s"]["read"]["median"] = 0
    with pytest.raises(UserError, match="read bandwidth"):
        local_mod.hardware_from_profile(bad)
