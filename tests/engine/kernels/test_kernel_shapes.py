"""Kernel shapes change the speed, never a bit: every value of every knob (`kernel_shapes.KNOBS`)
gives the default shape's products for every stored format and the float32 rows, on odd shapes and
1 to 18 x rows, and the same logits from a whole model on 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures import TinyShape, random_blocks, write_tiny_gguf

from roofline.engine.kernels import block_simd, layer_kernels
from roofline.engine.kernels.kernel_shapes import DEFAULT_SHAPE, KNOBS, KernelShape, variants
from roofline.engine.loading.block_formats import BLOCK_FORMATS
from roofline.engine.runtime.kernel_choice import KernelChoice

VARIANTS = variants()
STORED = [f for f, spec in BLOCK_FORMATS.items() if spec.block > 1]


def test_the_registry_names_each_field_once_and_the_default_is_a_candidate():
    assert sorted(k.field for k in KNOBS) == sorted(KernelShape._fields)
    for knob in KNOBS:
        assert getattr(DEFAULT_SHAPE, knob.field) in knob.values
    # every value of every knob, each in one variant
    assert len(VARIANTS) == 1 + sum(len(k.values) - 1 for k in KNOBS)


def _products(w, scale, x, shape: KernelShape) -> np.ndarray:
    rows = w.shape[0]
    out = np.empty((x.shape[0], rows), np.float32)
    layer_kernels.matvec_rows(w, scale, x, out, 0, rows, False, shape)
    acc = np.ones((x.shape[0], rows), np.float32)
    layer_kernels.matvec_rows(w, scale, x, acc, 3, rows - 2, True, shape)  # off the block grid
    return np.concatenate([out, acc])


@pytest.mark.parametrize("fmt", STORED)
def test_every_variant_gives_the_default_products_on_stored_rows(fmt):
    rng = np.random.default_rng(BLOCK_FORMATS[fmt].code)
    n = 2 * BLOCK_FORMATS[fmt].block if BLOCK_FORMATS[fmt].block == 256 else 160
    rows = 301  # many tiles of a 16 KiB shape, a partial last one, an odd last row
    raw = random_blocks(fmt, rows, n, rng)
    codes = block_simd.StoredCodes(
        np.full(rows, BLOCK_FORMATS[fmt].code, np.uint8), block_simd.ALL_FORMATS
    )
    for k in (1, 2, 4, 5, 8, 9, 18):
        x = rng.standard_normal((k, n)).astype(np.float32)
        want = _products(raw, codes, x, DEFAULT_SHAPE)
        for shape in VARIANTS[1:]:
            got = _products(raw, codes, x, shape)
            assert np.array_equal(got, want), f"{fmt}, {k} rows, {shape}"


@pytest.mark.parametrize("n_in", [577, 4096])
def test_every_variant_gives_the_default_products_on_float32_rows(n_in):
    rng = np.random.default_rng(n_in)
    w = rng.standard_normal((101, n_in), dtype=np.float32)
    scale = np.ones(101, np.float32)
    for k in (1, 3, 4, 5, 8, 17):
        x = rng.standard_normal((k, n_in), dtype=np.float32)
        want = _products(w, scale, x, DEFAULT_SHAPE)
        for shape in VARIANTS[1:]:
            assert np.array_equal(_products(w, scale, x, shape), want), f"{k} rows, {shape}"


@pytest.mark.parametrize("tensor_type", ["Q4_1", "Q8_0"])
def test_a_model_decodes_the_same_logits_in_every_variant(tmp_path, tensor_type):
    """Prefill, an 8-row verify and a 2-slot decode step, each variant on both kinds of pass,
    1 and 2 threads: the default shape's logits, bit for bit."""
    from roofline.engine import load_runner

    shape = TinyShape(hidden=256, n_heads=4, n_kv_heads=2, head_dim=64, ffn=512)
    path = str(write_tiny_gguf(tmp_path, tensor_type=tensor_type, shape=shape))

    def passes(runner) -> list[np.ndarray]:
        out = [runner.prefill(0, list(range(5, 40))), runner.prefill(1, [3, 1, 4, 1, 5])]
        out.append(runner.extend(0, [7, 8, 9, 10, 11, 12, 13, 14]))
        out.append(runner.decode([1, 0], [2, 6]))
        runner.release(0), runner.release(1)
        return out

    for threads in (1, 2):
        runner = load_runner(
            path, dtype="stored", threads=threads, max_batch=2, max_seq_len=64, warmup=False
        )
        runner.kernel_shape = runner.kernel_shape._replace(formats=block_simd.ALL_FORMATS)
        want = passes(runner)
        for variant in VARIANTS[1:]:
            runner.kernels = KernelChoice(variant, variant)
            for a, b in zip(passes(runner), want, strict=True):
                assert np.array_equal(a, b), f"{tensor_type}, {threads} threads, {variant}"
