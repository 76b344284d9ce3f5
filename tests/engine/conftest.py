"""Fixtures shared by the engine tests: tiny random models written once per session.

`tiny_gguf` and `tiny_hf_dir` hold the same weights (seed 0, Llama arch, untied, float32), written
as a GGUF file (llama.cpp layout, q/k permuted) and as a Hugging Face directory. Other variants:
call `fixtures.write_tiny_gguf` / `fixtures.write_tiny_hf_dir` with tmp_path.
"""

from __future__ import annotations

import pytest
from fixtures import write_tiny_gguf, write_tiny_hf_dir

import avx2_run


@pytest.fixture(scope="session")
def avx2_exactness_run(request):
    """The AVX2 run started when collection ended (tests/avx2_run.py); skips where this host needs
    none."""
    why = avx2_run.why_not_run()
    if why is not None:
        pytest.skip(why)
    run = avx2_run.session_run(request.config)
    if run is not None:
        yield run
        return
    # the verdict test deselected: started now, for the logits test alone
    process = avx2_run.start(avx2_run.new_folder())
    yield process.run
    process.stop()


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """Path of a tiny F32 Llama GGUF file (2 layers, hidden 64, 4 heads / 2 kv heads, vocab
    ~320)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny_gguf"), tensor_type="F32", seed=0)


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory):
    """Path of a tiny Hugging Face directory with the same weights as `tiny_gguf` (one safetensors
    file)."""
    return write_tiny_hf_dir(
        tmp_path_factory.mktemp("tiny_hf") / "tiny-llama", shards=1, dtype="float32", seed=0
    )
