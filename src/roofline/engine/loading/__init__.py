"""Checkpoint loaders: a GGUF file or a Hugging Face directory -> Checkpoint (config, HF-named
tensors, tokenizer)."""

from __future__ import annotations

import os
from pathlib import Path

from roofline.engine.loading.checkpoint import Checkpoint
from roofline.errors import UserError

__all__ = ["Checkpoint", "load_checkpoint"]


def load_checkpoint(path: str | os.PathLike | None, *, dequantize: bool = True) -> Checkpoint:
    """Load a model: None -> the default model; a `.gguf` file; or an HF directory (config.json +
    safetensors). dequantize=False: quantized GGUF tensors (and gpt-oss's MXFP4 safetensors
    experts) keep only their raw rows (what `--dtype stored` computes on)."""
    if path is None:
        from roofline.modelspec.default_model import default_model_path

        path = default_model_path()
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(
            f"model path {path} does not exist; pass a .gguf file or a Hugging Face model directory"
        )
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").is_file() and ggufs:
            if len(ggufs) > 1:
                names = ", ".join(p.name for p in ggufs[:4])
                raise UserError(f"{path} holds several GGUF files ({names}); pass the one to load")
            path = ggufs[0]  # a folder holding one GGUF file stands for that file
        else:
            from roofline.engine.loading.safetensors import load_hf_dir

            return load_hf_dir(path, dequantize=dequantize)
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic == b"GGUF" or path.suffix.lower() == ".gguf":
        from roofline.engine.loading.gguf import load_gguf

        return load_gguf(path, dequantize=dequantize)
    raise UserError(
        f"{path} is neither a GGUF file nor a Hugging Face model directory "
        "(config.json + *.safetensors)"
    )
