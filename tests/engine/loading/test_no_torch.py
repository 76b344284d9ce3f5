"""The engine runs without torch (the `engine` extra does not install it): in a process where
importing torch fails, every loader and every dtype's weights and RoPE tables are built, and they
equal what this process (torch loaded by the tests) builds."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
from fixtures import write_tiny_gguf, write_tiny_hf_dir

from roofline.engine.loading import load_checkpoint
from roofline.engine.runtime.model_runner import ModelRunner
from roofline.modelspec.default_model import default_model_path

# Builds each (file@dtype)'s runner and saves its arrays (`runner_arrays`, defined above MAIN in
# the script) to an .npz.
PRELUDE = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is not installed here (the test blocks it)")

sys.meta_path.insert(0, NoTorch())
import numpy as np
from roofline.engine.loading import load_checkpoint
from roofline.engine.runtime.model_runner import ModelRunner
"""
MAIN = """
out, cases = sys.argv[1], sys.argv[2:]
arrays = {}
for i, case in enumerate(cases):
    path, dtype = case.rsplit("@", 1)
    ckpt = load_checkpoint(path, dequantize=dtype != "stored")
    runner = ModelRunner(ckpt, dtype=dtype, max_batch=1, max_seq_len=64)
    for name, a in runner_arrays(runner).items():
        arrays[f"{i}/{name}"] = a
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
np.savez(out, **arrays)
"""


def runner_arrays(runner) -> dict[str, np.ndarray]:
    """The arrays a runner's kernels read: its weights' (the experts' a level deeper) and RoPE's
    tables."""
    out = {"cos": runner._cos, "sin": runner._sin}
    for part, value in vars(runner.weights).items():
        items = vars(value).items() if hasattr(value, "__dataclass_fields__") else [("", value)]
        for name, a in items:
            if isinstance(a, np.ndarray):
                out[f"{part}.{name}"] = a
    return out


def test_loaders_weights_and_rope_tables_need_no_torch(tmp_path):
    files = [
        write_tiny_gguf(tmp_path / "f32", tensor_type="F32"),
        write_tiny_gguf(tmp_path / "bf16", tensor_type="BF16"),
        write_tiny_gguf(tmp_path / "q8", tensor_type="Q8_0", arch="qwen3"),
        write_tiny_hf_dir(tmp_path / "hf" / "tiny-llama", dtype="bfloat16"),
    ]
    cases = [f"{p}@{d}" for p in files for d in ("fp32", "bf16", "int8", "stored")]
    cases.append(f"{default_model_path()}@stored")
    out = tmp_path / "arrays.npz"
    script = PRELUDE + inspect.getsource(runner_arrays) + MAIN
    done = subprocess.run(
        [sys.executable, "-c", script, str(out), *cases],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    assert len(got.files) > 10 * len(cases)
    for i, case in enumerate(cases):
        path, dtype = case.rsplit("@", 1)
        runner = ModelRunner(
            load_checkpoint(path, dequantize=dtype != "stored"),
            dtype=dtype,
            max_batch=1,
            max_seq_len=64,
        )
        want = runner_arrays(runner)
        assert {f"{i}/{name}" for name in want} <= set(got.files), case
        for name, a in want.items():
            assert np.array_equal(got[f"{i}/{name}"], a), (case, name)
