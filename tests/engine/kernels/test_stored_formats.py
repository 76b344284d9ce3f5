"""The kernels on weights as the file stores them (dtype `stored`) give the float32 path's bits.

Per format: a row widened in registers equals gguf-py's dequantization, and matrix-vector / k-row
products equal the float32 kernel over the dequantized matrix (`np.array_equal`, not a tolerance),
on odd shapes: rows that are a multiple of the block but not of the 64-weight SIMD step, a last
partial unit of rows, activations of 1..9 rows. Then whole models in every format: greedy ids and
logits of `--dtype stored` equal `--dtype fp32`, on 1 and 2 threads, a short and a long prompt.
"""

from __future__ import annotations

import numpy as np
import pytest
from fixtures import K_QUANTS, TinyShape, random_blocks, write_tiny_gguf
from numba import njit

from roofline.engine.kernels import block_simd, layer_kernels
from roofline.engine.kernels.kernel_shapes import DEFAULT_SHAPE
from roofline.engine.loading import load_checkpoint
from roofline.engine.loading.block_formats import BLOCK_FORMATS
from roofline.engine.loading.checkpoint import is_shape_only

FORMATS = list(BLOCK_FORMATS)
# rows of whole 256-blocks
K_SHAPE = TinyShape(hidden=256, n_heads=4, n_kv_heads=2, head_dim=64, ffn=512)


def _rows(fmt: str, rows: int, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(stored rows (rows, bytes) uint8, the same weights as float32 (rows, n))."""
    import gguf
    from gguf.constants import GGMLQuantizationType as QT

    if fmt in ("F32", "F16", "BF16"):
        v = rng.standard_normal((rows, n)).astype(np.float32)
        if fmt == "F32":
            return v.view(np.uint8).reshape(rows, -1), v
        if fmt == "F16":
            h = v.astype(np.float16)
            return h.view(np.uint8).reshape(rows, -1), h.astype(np.float32)
        bits = (v.view(np.uint32) >> 16).astype(np.uint16)
        return bits.view(np.uint8).reshape(rows, -1), (bits.astype(np.uint32) << 16).view(
            np.float32
        )
    raw = random_blocks(fmt, rows, n, rng)
    return raw, gguf.quants.dequantize(raw, QT[fmt]).reshape(rows, n).astype(np.float32)


def _widths(fmt: str) -> list[int]:
    block = BLOCK_FORMATS[fmt].block
    if block == 1:
        return [77, 96, 130]  # 77: not even a multiple of 8 (the scalar tail)
    if block == 32:
        return [96, 160]  # multiples of 32 but not of 64: the 8-lane middle of the sums
    return [256, 768]


def _all(codes: np.ndarray) -> block_simd.StoredCodes:
    """Codes with the set of every format: one compile serves every format's test."""
    return block_simd.StoredCodes(codes, block_simd.ALL_FORMATS)


@njit
def _widen_rows(w, fmt, out):
    """out (rows, n_in) float32 = every row of a stored matrix widened by the kernels' loader."""
    n = out.shape[1]
    for o in range(w.shape[0]):
        block_simd.stored_row(w, o * w.shape[1], fmt.codes[o], fmt.formats, n, out, o * n)


@pytest.mark.parametrize("fmt", FORMATS)
def test_products_on_stored_rows_equal_the_float32_kernel_bit_for_bit(fmt):
    rng = np.random.default_rng(BLOCK_FORMATS[fmt].code)
    code = BLOCK_FORMATS[fmt].code
    for n in _widths(fmt):
        rows = 37
        raw, dense = _rows(fmt, rows, n, rng)
        codes = _all(np.full(rows, code, np.uint8))
        widened = np.empty((rows, n), np.float32)
        _widen_rows(raw, codes, widened)
        assert np.array_equal(widened.view(np.uint32), dense.view(np.uint32)), (
            f"{fmt} n={n}: widening differs"
        )
        ones = np.ones(rows, np.float32)
        # groups of 8, 7, 6, 5, 4, 3, 2, 1 x rows over pairs of weight rows; 37 rows leave one
        # unpaired
        for k in (1, 2, 3, 4, 5, 6, 7, 9, 14, 15, 16, 18):
            x = rng.standard_normal((k, n)).astype(np.float32)
            got, want = np.empty((k, rows), np.float32), np.empty((k, rows), np.float32)
            layer_kernels.matvec_rows(raw, codes, x, got, 0, rows, False, DEFAULT_SHAPE)
            layer_kernels.matvec_rows(dense, ones, x, want, 0, rows, False, DEFAULT_SHAPE)
            assert np.array_equal(got, want), (
                f"{fmt} n={n} k={k}: max diff {np.abs(got - want).max()}"
            )
            # accumulate over a row range
            layer_kernels.matvec_rows(raw, codes, x, got, 3, 11, True, DEFAULT_SHAPE)
            layer_kernels.matvec_rows(dense, ones, x, want, 3, 11, True, DEFAULT_SHAPE)
            assert np.array_equal(got, want)


def test_rows_of_several_formats_in_one_matrix():
    """A Q4_K_M file mixes Q4_K and Q6_K rows in one stack: each row is computed in its format."""
    rng = np.random.default_rng(7)
    n = 256
    parts = [_rows(f, 5, n, rng) for f in ("Q4_K", "Q6_K", "Q8_0", "F16")]
    stride = max(raw.shape[1] for raw, _ in parts)
    raw = np.zeros((20, stride), np.uint8)
    for i, (r, _) in enumerate(parts):
        raw[5 * i : 5 * i + 5, : r.shape[1]] = r
    codes = _all(
        np.repeat([BLOCK_FORMATS[f].code for f in ("Q4_K", "Q6_K", "Q8_0", "F16")], 5).astype(
            np.uint8
        )
    )
    dense = np.concatenate([d for _, d in parts])
    x = rng.standard_normal((6, n)).astype(np.float32)
    got, want = np.empty((6, 20), np.float32), np.empty((6, 20), np.float32)
    layer_kernels.matvec_rows(raw, codes, x, got, 0, 20, False, DEFAULT_SHAPE)
    layer_kernels.matvec_rows(dense, np.ones(20, np.float32), x, want, 0, 20, False, DEFAULT_SHAPE)
    assert np.array_equal(got, want)


def test_a_kernel_compiled_for_a_set_of_formats_widens_those_and_marks_any_other():
    """Kernels are compiled for the formats a model uses (FormatSet): a row in a format outside
    the set is NaN, never silently another format's values; inside it, the bits of the full set."""
    rng = np.random.default_rng(11)
    n = 64
    raw8, dense8 = _rows("Q8_0", 3, n, rng)
    raw4, _ = _rows("Q4_0", 3, n, rng)
    raw = np.zeros((6, max(raw8.shape[1], raw4.shape[1])), np.uint8)
    raw[:3, : raw8.shape[1]], raw[3:, : raw4.shape[1]] = raw8, raw4
    codes = np.array([BLOCK_FORMATS["Q8_0"].code] * 3 + [BLOCK_FORMATS["Q4_0"].code] * 3, np.uint8)
    assert block_simd.FormatSet.of(codes).codes == tuple(
        sorted({BLOCK_FORMATS["Q8_0"].code, BLOCK_FORMATS["Q4_0"].code})
    )
    only_q8 = block_simd.StoredCodes(codes, block_simd.FormatSet.of(codes[:3]))
    x = rng.standard_normal((2, n)).astype(np.float32)
    got, want = np.empty((2, 6), np.float32), np.empty((2, 3), np.float32)
    layer_kernels.matvec_rows(raw, only_q8, x, got, 0, 6, False, DEFAULT_SHAPE)
    layer_kernels.matvec_rows(dense8, np.ones(3, np.float32), x, want, 0, 3, False, DEFAULT_SHAPE)
    assert np.array_equal(got[:, :3], want)
    assert np.isnan(got[:, 3:]).all()


def test_fp16_widening_without_f16c_is_exact_for_every_value():
    """The integer path used on CPUs without F16C widens all 65,536 fp16 values as numpy does."""
    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic

    from roofline.engine.kernels import block_simd

    @intrinsic
    def widen16(typingctx, bits, i, out):
        def codegen(context, builder, sig, args):
            src = context.make_array(sig.args[0])(context, builder, args[0])
            dst = context.make_array(sig.args[2])(context, builder, args[2])
            ptr = builder.bitcast(
                builder.gep(src.data, [args[1]]), ir.VectorType(ir.IntType(16), 16).as_pointer()
            )
            value = block_simd.half_to_f32(builder, builder.load(ptr, align=2), 16, f16c=False)
            out_ptr = builder.bitcast(
                builder.gep(dst.data, [args[1]]), ir.VectorType(ir.FloatType(), 16).as_pointer()
            )
            builder.store(value, out_ptr, align=4)
            return context.get_dummy_value()

        return types.none(bits, i, out), codegen

    @njit
    def widen_all(bits, out):
        for i in range(0, bits.shape[0], 16):
            widen16(bits, i, out)

    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    out = np.empty(65536, np.float32)
    widen_all(bits, out)
    want = bits.view(np.float16).astype(np.float32)
    finite = np.isfinite(want)
    assert np.array_equal(out.view(np.uint32)[finite], want.view(np.uint32)[finite])
    assert np.array_equal(np.isnan(out), np.isnan(want)) and np.array_equal(
        out[np.isinf(want)], want[np.isinf(want)]
    )


def _model_file(tmp_path_factory, fmt: str):
    folder = tmp_path_factory.mktemp(f"stored_{fmt.lower()}")
    # Q4_K with Q6_K v and down rows and a Q8_0 embedding, as llama-quantize mixes them
    if fmt == "Q4_K_M":
        overrides = {
            f"model.layers.{i}.{n}.weight": "Q6_K"
            for i in range(2)
            for n in ("self_attn.v_proj", "mlp.down_proj")
        }
        overrides["model.embed_tokens.weight"] = "Q8_0"
        return write_tiny_gguf(
            folder, tensor_type="Q4_K", shape=K_SHAPE, type_overrides=overrides, tie_embeddings=True
        )
    shape = K_SHAPE if fmt in K_QUANTS else None
    return write_tiny_gguf(folder, tensor_type=fmt, shape=shape)


PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n    return a + b\n" * 3,
    "hello hello hello world",
]


@pytest.mark.parametrize("fmt", [*FORMATS, "Q4_K_M"])
def test_a_model_in_each_format_decodes_the_float32_paths_ids(tmp_path_factory, fmt):
    from fixtures import greedy_ids

    from roofline.engine import load_runner

    path = str(_model_file(tmp_path_factory, fmt))
    raw_only = load_checkpoint(path, dequantize=False)  # what --dtype stored loads: no fp32 copy
    assert fmt.split("_M")[0] in set(raw_only.stored_format.values())
    assert all(is_shape_only(raw_only.tensors[name]) for name in raw_only.raw)
    reference = load_runner(path, dtype="fp32", max_seq_len=160, threads=1)
    for threads in (1, 2):
        runner = load_runner(path, dtype="stored", max_seq_len=160, threads=threads, warmup=False)
        # kernels compiled for every format: one compile serves the twelve files (a model's own
        # set compiles apart, about a minute each; hence no warm-up, which would compile it)
        runner.kernel_shape = runner.kernel_shape._replace(formats=block_simd.ALL_FORMATS)
        assert runner.bytes_per_token == runner.file_bytes_per_token
        for prompt in PROMPTS:
            ids = reference.tokenizer.encode(prompt)
            want = reference.prefill(0, ids)
            got = runner.prefill(0, ids)
            assert np.array_equal(got, want), f"{fmt}, {threads} threads: prefill logits differ"
            reference.release(0), runner.release(0)
            assert greedy_ids(runner, ids, 64) == greedy_ids(reference, ids, 64), (
                f"{fmt}: {prompt!r}"
            )
