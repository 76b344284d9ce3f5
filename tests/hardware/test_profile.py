"""Where the local hardware profile lives, and that it is written atomically and read back strictly."""

from __future__ import annotations

import json
import os

import pytest

from roofline.errors import UserError
from roofline.hardware import profile as prof


def _stats(median: float) -> dict:
    return {"median": median, "min": median * 0.9, "max": median * 1.1, "runs": [median * 0.9, median, median * 1.1]}


def _profile(read: float = 3.1e10) -> dict:
    return {
        "name": "local",
        "measured_at": "2026-01-01T00:00:00+00:00",
        "roofline_version": "0",
        "cpu": "test cpu",
        "threads": 2,
        "memory_bytes": 1 << 34,
        "bandwidth_bytes_per_s": {"read": _stats(read), "copy": _stats(2.5e10), "triad": _stats(2.2e10)},
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
        (json.dumps({**_profile(), "bandwidth_bytes_per_s": {"read": _stats(1e10), "copy": _stats(1e10)}}), "triad"),
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
