"""Fixtures shared by the engine tests: tiny random models written once per session.

`tiny_gguf` and `tiny_hf_dir` hold the same weights (seed 0, Llama arch, untied, float32), written
as a GGUF file (llama.cpp layout, q/k permuted) and as a Hugging Face directory. Other variants:
call `fixtures.write_tiny_gguf` / `fixtures.write_tiny_hf_dir` with tmp_path.
"""

from __future__ import annotations

import avx2_run
import pytest
from fixtures import write_tiny_gguf, write_tiny_hf_dir

# test_isa.py's AVX2 exactness run, while the session goes on (avx2_run)
AVX2_RUN = pytest.StashKey[avx2_run.Avx2Run]()


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted = any(item.nodeid.endswith(avx2_run.VERDICT_TEST) for item in session.items)
    if wanted and avx2_run.why_not_run() is None:
        session.config.stash[AVX2_RUN] = avx2_run.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(AVX2_RUN, None)
    if run is not None:
        run.stop()


@pytest.fixture(scope="session")
def avx2_exactness_run(request) -> avx2_run.Avx2Run:
    """The AVX2 run started when collection ended; skips where this host needs none."""
    why = avx2_run.why_not_run()
    if why is not None:
        pytest.skip(why)
    run = request.config.stash.get(AVX2_RUN, None)
    if run is None:  # the verdict test deselected: started now, for the logits test alone
        run = request.config.stash[AVX2_RUN] = avx2_run.start()
    return run


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
