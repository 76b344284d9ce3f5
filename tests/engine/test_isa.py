"""The engine's exactness tests again, on the code an AVX2 host runs; and the same logits from both.

The machines these tests meet differ (AVX-512 Xeons, Zen 4, AVX2-only EPYCs), and a promise kept by
one instruction set's code can break in another's: a host with AVX-512 never runs its AVX2 code
unless asked. numba compiles for NUMBA_CPU_NAME with the features of NUMBA_CPU_FEATURES (the name
alone keeps the host's features: "haswell" on an AVX-512 host still compiles AVX-512 code), so the
subprocess gets haswell and the host's features with every AVX-512, AMX and later vector extension
turned off; the kernels' own choices follow the same features (`simd.target_has`). torch's MKL
takes its AVX2 kernels under MKL_ENABLE_INSTRUCTIONS=AVX2. That pytest subprocess, with a kernel
cache of its own, runs every `exactness` test (tests/conftest.py) on AVX2 code, started when
collection ends so that its compiles overlap the session's (avx2_run.py). The kernels sum
in one order written out in the IR (roofline.simd), divide exactly and widen blocks exactly; the
last test compares the AVX2 build's logits with this process', bit for bit.

On a host without AVX-512 the suite's own run already is the AVX2 run, and these tests say so
instead of running it twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from avx2_run import INSIDE, avx2_env

HERE = Path(__file__).resolve().parent
DTYPES = ("fp32", "bf16", "int8", "stored")


def sample_logits(model_dir: Path) -> dict[str, np.ndarray]:
    """Logits of a tiny model (an F32 file; for `stored` a Q4_1 one with a Q8_0 embedding, the
    shipped file's formats) in every dtype: a 150-token prefill, a decode step and a 4-row verify
    pass."""
    from fixtures import write_tiny_gguf

    from roofline.engine import load_runner

    f32 = write_tiny_gguf(model_dir, tensor_type="F32", seed=0)
    q4_1 = write_tiny_gguf(
        model_dir,
        tensor_type="Q4_1",
        seed=0,
        type_overrides={"model.embed_tokens.weight": "Q8_0"},
    )
    ids = [int(t) for t in np.random.default_rng(0).integers(3, 300, 150)]
    out = {}
    for dtype in DTYPES:
        path = q4_1 if dtype == "stored" else f32
        runner = load_runner(str(path), dtype=dtype, max_seq_len=256, threads=2, warmup=False)
        out[f"{dtype} prefill"] = runner.prefill(0, ids)
        out[f"{dtype} decode"] = runner.decode([0], [5])[0]
        out[f"{dtype} verify"] = runner.extend(0, [7, 8, 9, 10])
    return out


def test_the_kernels_name_the_instruction_set_they_are_compiled_for():
    """`kernel_isa` (printed by probe and prepare) follows numba's target, not the host's flags."""
    code = "from roofline.simd import kernel_isa; print(kernel_isa())"
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx2,+fma,+f16c"}
    env.pop(INSIDE, None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "haswell: avx2+fma+f16c", p.stderr
    env["NUMBA_CPU_FEATURES"] = "+avx512f,+avx512bw,+avx2,+fma"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.stdout.strip() == "haswell: avx512f+avx512bw+avx2+fma", p.stderr


def test_the_exactness_tests_pass_on_avx2_code(avx2_exactness_run):
    """The run started when collection ended (tests/engine/avx2_run.py): its verdict."""
    code, output = avx2_exactness_run.verdict()
    tail = output[-6000:]
    assert code == 0, f"the exactness tests failed on AVX2 code:\n{tail}"
    assert " passed" in output and " failed" not in output, tail


# Once not so: AVX2 kernels compiled by a run that had compiled Gemma 3's first gave other bits
# (86-91% of values, within 4e-7 of the largest logit) than a fresh compile, while the host's did
# not: the code depended on what the process had compiled before. It went with the fast-math
# flags that leave LLVM a choice (fusing, reordering, reciprocals, approximations): the kernels'
# flags now change no value (`matrices.FASTMATH`), and this test holds (docs/measured.md).
def test_avx2_code_gives_this_hosts_logits_bit_for_bit(avx2_exactness_run, tmp_path):
    avx2_exactness_run.verdict()  # its cache, filled
    saved = tmp_path / "avx2.npz"
    run = subprocess.run(
        [sys.executable, __file__, str(tmp_path / "model"), str(saved)],
        cwd=HERE,
        env=avx2_env(avx2_exactness_run.cache_dir, python_path=HERE.parent),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    avx2 = np.load(saved)
    here = sample_logits(tmp_path / "model")
    assert sorted(avx2.files) == sorted(here)
    differ = [name for name in here if not np.array_equal(avx2[name], here[name])]
    assert differ == [], f"AVX2 code's logits differ from this host's: {differ}"


if __name__ == "__main__":  # the AVX2 side of the test above: python test_isa.py MODEL_DIR OUT
    sys.path.insert(0, str(HERE))
    np.savez(sys.argv[2], **sample_logits(Path(sys.argv[1])))
