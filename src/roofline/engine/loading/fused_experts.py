"""Checkpoints that hold a layer's experts as one tensor per projection (gpt-oss's safetensors),
split into the engine's per-expert tensors, `mlp.experts.{e}.{gate,up,down}_proj.{weight,bias}`
in nn.Linear's (out, in) layout.

gpt-oss (transformers' GptOssExperts computes x @ W, not nn.Linear's x W^T):

    gate_up_proj        (E, hidden, 2 ffn)  columns interleaved: gate = [..., ::2], up = [..., 1::2]
    gate_up_proj_bias   (E, 2 ffn)          the same interleave
    down_proj           (E, ffn, hidden)
    down_proj_bias      (E, hidden)

so expert e's gate weight is gate_up_proj[e][:, ::2]^T (ffn, hidden) and its down weight
down_proj[e]^T (hidden, ffn): the layout llama.cpp's converter writes as ffn_{gate,up,down}_exps.
"""

from __future__ import annotations

import re

import numpy as np

_FUSED = re.compile(r"(model\.layers\.\d+\.mlp\.experts\.)(gate_up_proj|down_proj)(_bias)?")


def split_fused_experts(name: str, tensor: np.ndarray) -> dict[str, np.ndarray]:
    """The per-expert tensors of a fused one (module doc), contiguous; {} for any other name."""
    match = _FUSED.fullmatch(name)
    if match is None:
        return {}
    prefix, projection, bias = match.groups()
    kind = "bias" if bias else "weight"
    out = {}
    for e in range(tensor.shape[0]):
        t = tensor[e]
        # a weight's columns are the outputs: transpose to (out, in); a bias is one row of them
        parts = (
            {"down_proj": t}
            if projection == "down_proj"
            else {"gate_proj": t[..., ::2], "up_proj": t[..., 1::2]}
        )
        for proj, part in parts.items():
            out[f"{prefix}{e}.{proj}.{kind}"] = np.ascontiguousarray(part if bias else part.T)
    return out
