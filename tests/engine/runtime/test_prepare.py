"""`roofline serve --prepare`: the kernels of a (model, dtype) compiled once, then a stamp."""

import os
import subprocess
import sys

from roofline.engine.runtime.prepare import prepare, prepared, stamp_path


def test_prepare_stamps_a_model_and_dtype_and_is_quick_the_second_time(
    tiny_gguf, monkeypatch, tmp_path
):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    assert not prepared(tiny_gguf, "fp32")
    assert "ready in" in prepare(tiny_gguf, "fp32", threads=1)
    assert prepared(tiny_gguf, "fp32") and stamp_path(tiny_gguf, "fp32").is_file()
    assert "prepared already" in prepare(tiny_gguf, "fp32", threads=1)
    assert not prepared(tiny_gguf, "stored")  # each format has kernels of its own
    st = os.stat(tiny_gguf)
    os.utime(tiny_gguf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # another file
    assert not prepared(tiny_gguf, "fp32")


def test_serve_prepare_exits_without_serving(tiny_gguf, tmp_path):
    env = {**os.environ, "ROOFLINE_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "roofline", "serve", "--prepare", "--model", str(tiny_gguf)]
    p = subprocess.run([*argv, "--dtype", "fp32"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "ready in" in p.stdout, p.stderr[-2000:]
    p = subprocess.run([*argv, "--dtype", "fp8"], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "--dtype must be one of" in p.stderr
