"""Where the local hardware profile lives, and that it is written atomically and read back
strictly."""

from __future__ import annotations

import json
import os

import pytest

from roofline.errors import UserError
from roofline.hardware import profile as prof


def _stats(median: float) -> dict:
    return {
        "median": median,
        "min": median * 0.9,
        "max": median * 1.1,
        "runs": [median * 0.9, median, median * 1.1],
    }


def _profile(read: float = 3.1e10) -> dict:
    return {
        "name": "local",
        "measured_at": "2026-01-01T00:00:00+00:00",
        "roofline_version": "0",
        "cpu": "test cpu",
        "threads": 2,
        "memory_bytes": 1 << 34,
        "bandwidth_bytes_per_s": {
            "read": _stats(read),
            "copy": _stats(2.5e10),
            "triad": _stats(2.2e10),
        },
        "flops": {"matvec_fp32": _stats(1e10), "matmul_fp32": _stats(1.8e11)},
        "backends": {"kernels": {"read": "numpy"}, "versions": {"numpy": "x"}},
        "settings": {"size_bytes": 1 << 20},
    }


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(prof.CACHE_DIR_ENV, str(tmp_path))
    return tmp_path


def test_profile_dir_follows_env_var_else_platform_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(prof.CACHE_DIR_ENV, str(tmp_path / "c"))
    assert prof.profile_dir() == tmp_path / "c"
    assert prof.profile_path() == tmp_path / "c" / "hardware" / "local.json"
    monkeypatch.delenv(prof.CACHE_DIR_ENV)
    import platformdirs

    assert str(prof.profile_dir()) == platformdirs.user_cache_dir("roofline")


def test_absent_profile_loads_as_none(cache):
    assert prof.load_local_profile() is None


def test_round_trip(cache):
    d = _profile()
    path = prof.save_profile(d)
    assert path == cache / "hardware" / "local.json"
    assert json.loads(path.read_text()) == d
    assert prof.load_local_profile() == d
    # a second save replaces the first and leaves no temporary file behind
    prof.save_profile(_profile(read=4.0e10))
    assert prof.load_local_profile()["bandwidth_bytes_per_s"]["read"]["median"] == 4.0e10
    assert [p.name for p in path.parent.iterdir()] == ["local.json"]


def test_failed_save_keeps_the_old_profile_and_no_temp_file(cache, monkeypatch):
    prof.save_profile(_profile(read=1.0e10))

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(prof.os, "replace", broken_replace)
    with pytest.raises(OSError):
        prof.save_profile(_profile(read=9.0e10))
    monkeypatch.setattr(prof.os, "replace", os.replace)
    assert prof.load_local_profile()["bandwidth_bytes_per_s"]["read"]["median"] == 1.0e10
    assert [p.name for p in prof.profile_path().parent.iterdir()] == ["local.json"]


def test_unwritable_cache_dir_is_a_user_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(prof.CACHE_DIR_ENV, str(blocker))
    with pytest.raises(UserError, match="--no-save"):
        prof.save_profile(_profile())


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"flops": {}}', "bandwidth_bytes_per_s"),
        (
            json.dumps(
                {
                    **_profile(),
                    "bandwidth_bytes_per_s": {"read": _stats(1e10), "copy": _stats(1e10)},
                }
            ),
            "triad",
        ),
        (json.dumps(_profile(read=-1.0)), "read"),
        (json.dumps(_profile(read=float("nan"))), "read"),
    ],
)
def test_corrupt_profile_says_to_rerun_probe(cache, text, problem):
    path = prof.profile_path()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(UserError) as e:
        prof.load_local_profile()
    msg = str(e.value)
    assert problem in msg and "roofline probe" in msg and "\n" not in msg


# ---- the best read rate the machine has shown: it only rises
# -----------------------------------------


def _with_best(read: float, best: float, when: str = "2026-01-01T00:00:00+00:00") -> dict:
    d = _profile(read=read)
    d["measured_at"] = when
    d["bandwidth_bytes_per_s"]["read"].update(best=best, kernel="simd-sum")
    return d


def test_a_probe_records_its_own_best_read(cache):
    d = _with_best(20e9, 22e9)
    prof.save_profile(d)
    best = prof.load_local_profile()[prof.BEST_READ]
    assert best == {
        "bytes_per_s": 22e9,
        "measured_at": "2026-01-01T00:00:00+00:00",
        "by": prof.PROBE,
        "kernel": "simd-sum",
    }


def test_a_window_that_measures_more_raises_the_best_and_a_lower_one_does_not(cache):
    prof.save_profile(_with_best(20e9, 22e9))
    assert not prof.note_read_rate(21e9, by="bench window", kernel="gemv")  # below the probe's 22
    assert prof.load_local_profile()[prof.BEST_READ]["bytes_per_s"] == 22e9
    assert prof.note_read_rate(
        62e9, by="bench window", kernel="gemv", measured_at="2026-01-01T01:00:00+00:00"
    )
    best = prof.load_local_profile()[prof.BEST_READ]
    assert best == {
        "bytes_per_s": 62e9,
        "measured_at": "2026-01-01T01:00:00+00:00",
        "by": "bench window",
        "kernel": "gemv",
    }
    for lower in (26e9, 61.9e9, 62e9):
        assert not prof.note_read_rate(lower, by="generate window")
    assert prof.load_local_profile()[prof.BEST_READ]["by"] == "bench window"
    for nonsense in (float("nan"), float("inf"), -1.0, 0.0, True):
        assert not prof.note_read_rate(nonsense, by="x")
    assert prof.load_local_profile()[prof.BEST_READ]["bytes_per_s"] == 62e9


def test_a_probe_in_a_slow_minute_keeps_the_higher_best(cache):
    prof.save_profile(_with_best(20e9, 30e9))
    assert prof.note_read_rate(62e9, by="bench window", kernel="gemv")
    slow = _with_best(18e9, 22e9, when="2026-01-02T00:00:00+00:00")
    prof.save_profile(slow)
    saved = prof.load_local_profile()
    # the probe's own figures as measured
    assert saved["bandwidth_bytes_per_s"]["read"]["best"] == 22e9
    assert (
        saved[prof.BEST_READ]["bytes_per_s"] == 62e9
        and saved[prof.BEST_READ]["by"] == "bench window"
    )
    # a probe faster than every window so far takes over
    prof.save_profile(_with_best(60e9, 70e9, when="2026-01-03T00:00:00+00:00"))
    assert prof.load_local_profile()[prof.BEST_READ] == {
        "bytes_per_s": 70e9,
        "measured_at": "2026-01-03T00:00:00+00:00",
        "by": prof.PROBE,
        "kernel": "simd-sum",
    }
    # another CPU's best is not this machine's
    other = {**_with_best(10e9, 11e9), "cpu": "another cpu"}
    prof.save_profile(other)
    assert prof.load_local_profile()[prof.BEST_READ]["bytes_per_s"] == 11e9


def test_without_a_profile_a_window_changes_nothing(cache):
    assert not prof.note_read_rate(62e9, by="bench window")
    assert prof.load_local_profile() is None and not prof.profile_path().exists()


def test_a_damaged_profile_is_left_alone_by_a_window(cache):
    path = prof.profile_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert not prof.note_read_rate(62e9, by="bench window")
    assert path.read_text() == "{not json"


def test_the_short_probe_of_a_run_window_raises_the_profile(cache, monkeypatch):
    """The run windows' real measurement (`window.short_probe`), its timing faked."""
    from types import SimpleNamespace

    from roofline.hardware import readbw
    from roofline.hardware.window import short_probe

    prof.save_profile(_with_best(20e9, 22e9))
    rates = iter([26e9, 24e9])
    monkeypatch.setattr(
        readbw,
        "read_bandwidth_now",
        lambda *a, **k: SimpleNamespace(best_bytes_per_s=next(rates), best_kernel="gemv"),
    )
    assert short_probe(by="the run window of `roofline bench`") == (26e9, "gemv")
    assert short_probe() == (24e9, "gemv")
    best = prof.load_local_profile()[prof.BEST_READ]
    assert (
        best["bytes_per_s"] == 26e9
        and best["by"] == "the run window of `roofline bench`"
        and best["kernel"] == "gemv"
    )


def test_hardware_local_never_sits_below_the_best_shown(cache):
    from roofline.hardware.local import hardware_from_profile, local_hardware

    prof.save_profile(_with_best(20e9, 22e9))
    assert local_hardware().bandwidth_bytes_per_s == 22e9  # the probe's own best pass
    prof.note_read_rate(
        26e9,
        by="the run window of `roofline generate`",
        kernel="gemv",
        measured_at="2026-01-01T00:30:00+00:00",
    )
    hw = local_hardware()
    assert hw.bandwidth_bytes_per_s == 26e9
    assert (
        "26.0 GB/s by the run window of `roofline generate` (gemv) at 2026-01-01T00:30:00+00:00"
        in hw.bandwidth_note
    )
    assert "above the probe's 22.0 GB/s" in hw.bandwidth_note and "2026-01-01T00:30:00" in hw.source
    # a profile written before best_read existed reads as before
    old = _with_best(20e9, 22e9)
    assert hardware_from_profile(old).bandwidth_bytes_per_s == 22e9


def test_probe_output_says_when_the_profile_keeps_a_higher_best(cache):
    from roofline.cli.probe import _kept_best_note

    prof.save_profile(_with_best(20e9, 30e9))
    prof.note_read_rate(
        62e9, by="the run window of `roofline bench`", measured_at="2026-01-01T01:00:00+00:00"
    )
    slow = _with_best(18e9, 22e9)
    prof.save_profile(slow)  # as `roofline probe` does before printing
    note = _kept_best_note(slow)
    assert note.startswith(
        "This probe's best read pass, 22.0 GB/s, "
        "is below the best this machine has shown: 62.0 GB/s"
    )
    assert "the run window of `roofline bench` at 2026-01-01T01:00:00+00:00" in note
    assert _kept_best_note(_with_best(60e9, 70e9)) is None
