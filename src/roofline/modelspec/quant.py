"""Weight format per component: the checkpoint's `quantization_config`, then the user's overrides.

- gpt-oss: `{"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
  "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}` -> routed experts MXFP4, the
  rest bf16;
- DeepSeek-V3 / Kimi K2: `{"quant_method": "fp8", "weight_block_size": [128, 128]}` -> linear
  layers fp8 with a 128x128 block scale; router, embeddings, lm_head, norms bf16;
- GPTQ / AWQ: `{"bits": 4, "group_size": 128}` -> int4 + one fp16 scale per 128 weights.

`--weights`: one format for all (`fp8`), per component (`experts=mxfp4,attention=bf16`), or both
(`fp8,lm_head=bf16`). Norms keep their dtype unless named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.components import components
from roofline.modelspec.formats import (
    FORMATS,
    WeightFormat,
    fp8_block_format,
    group_int_format,
    parse_format,
)
from roofline.modelspec.model import COMPONENT_KEYS, ModelSpec

# what quantizers convert by default
LINEAR = ("weights", "attention", "mlp", "experts", "shared_experts")

_KEY_ALIASES = {
    "attn": "attention",
    "self_attn": "attention",
    "dense": "mlp",
    "ffn": "mlp",
    "dense_mlp": "mlp",
    "moe": "experts",
    "routed": "experts",
    "routed_experts": "experts",
    "expert": "experts",
    "shared": "shared_experts",
    "shared_expert": "shared_experts",
    "gate": "router",
    "head": "lm_head",
    "lm-head": "lm_head",
    "output": "lm_head",
    "embed": "embeddings",
    "embedding": "embeddings",
    "embed_tokens": "embeddings",
    "norm": "norms",
    "biases": "norms",
}


def _text(value: Any, default: str = "") -> str:
    """A config string, or the default for anything else (a number there may be too long to
    print)."""
    return value if isinstance(value, str) else default


def _components_named_by(pattern: str) -> set[str]:
    """Which components a module-name pattern such as 'model.layers.*.self_attn' or 're:.*mlp.gate$'
    covers."""
    p = pattern.lower()
    hits: set[str] = set()
    if "lm_head" in p:
        hits.add("lm_head")
    if "embed" in p:
        hits.add("embeddings")
    if "attn" in p or "attention" in p:
        hits.add("attention")
    if "router" in p or re.search(r"mlp\.gate(?![_a-z])", p):
        hits.add("router")
    if "shared_expert" in p:
        hits.add("shared_experts")
    elif "expert" in p:
        hits.add("experts")
    if re.search(r"\bmlp\b\W*$", p) or p.rstrip("$").endswith(".mlp"):
        hits.update({"mlp", "experts", "shared_experts"})
    return hits


def _method_format(qc: dict[str, Any], method: str) -> tuple[WeightFormat, tuple[str, ...]] | None:
    """(format of the converted weights, components converted by default), or None when unknown."""
    if method == "mxfp4":
        return FORMATS["mxfp4"], ("experts",)  # the MXFP4 integration swaps only the expert blocks
    if method in ("fp8", "fbgemm_fp8"):
        return fp8_block_format(qc.get("weight_block_size")), LINEAR
    if method in ("gptq", "awq"):
        bits, group = (
            qc.get("bits", qc.get("w_bit")),
            qc.get("group_size", qc.get("q_group_size", 128)),
        )
        if isinstance(bits, bool) or not isinstance(bits, int):
            raise UserError(f"{method} quantization_config has no usable 'bits'; pass --weights")
        group = group if isinstance(group, int) and not isinstance(group, bool) else 128
        return group_int_format(bits, group), LINEAR
    if method == "bitsandbytes":
        if qc.get("load_in_4bit"):  # NF4 blocks of 64 with an 8-bit absmax (double quantization)
            return WeightFormat("nf4", 4.0 + 8.0 / 64, "bitsandbytes NF4"), LINEAR
        return FORMATS["int8"], LINEAR
    if method == "modelopt":
        algo = _text(qc.get("quant_algo")).lower()
        if "nvfp4" in algo:
            return FORMATS["nvfp4"], LINEAR
        if "fp8" in algo:
            return FORMATS["fp8"], LINEAR
        return None
    if method == "compressed-tensors":
        groups = qc.get("config_groups")
        first = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
        w = first.get("weights") if isinstance(first, dict) else None
        if not isinstance(w, dict):
            return None
        bits, kind, group = w.get("num_bits"), _text(w.get("type"), "int"), w.get("group_size")
        if bits == 8 and kind == "float":
            return FORMATS["fp8"], LINEAR
        if bits == 4 and kind == "float":
            return FORMATS["nvfp4"], LINEAR
        if isinstance(bits, int) and not isinstance(bits, bool):
            group = group if isinstance(group, int) and not isinstance(group, bool) else None
            return group_int_format(bits, group), LINEAR
        return None
    return None


def default_formats(
    quantization_config: Any, dtype: str
) -> tuple[dict[str, WeightFormat] | None, str]:
    """The checkpoint's own format per component, and a one-line note on where it came from.

    None (with the reason) when the quantization method is one roofline cannot read.
    """
    base = parse_format(dtype, what="checkpoint dtype")
    formats = {k: base for k in COMPONENT_KEYS}
    if quantization_config in (None, {}):
        return formats, f"{base.name} checkpoint"
    if not isinstance(quantization_config, dict):
        raise UserError(
            "config's quantization_config must be an object; fix the config or pass --weights"
        )
    method = _text(quantization_config.get("quant_method")).lower()
    found = _method_format(quantization_config, method)
    if found is None:
        return None, f"quantization method {method or '(none)'!r} is not one roofline reads"
    fmt, converted = found
    keep: set[str] = {"lm_head", "embeddings", "norms", "router"}
    for key in ("modules_to_not_convert", "ignore", "ignored_layers", "exclude"):
        patterns = quantization_config.get(key)
        if isinstance(patterns, list):
            for p in patterns:
                if isinstance(p, str):
                    keep |= _components_named_by(p)
    for k in converted:
        if k not in keep:
            formats[k] = fmt
    quantized = (
        ", ".join(k for k in COMPONENT_KEYS if formats[k] is fmt and k != "weights") or "nothing"
    )
    return formats, f"{method}: {quantized} in {fmt.label()}, the rest {base.name}"


def parse_weight_overrides(text: str) -> tuple[WeightFormat | None, dict[str, WeightFormat]]:
    """'fp8' -> (fp8, {}); 'experts=mxfp4,attention=bf16' -> (None, {...}); mixed forms allowed."""
    bare: WeightFormat | None = None
    named: dict[str, WeightFormat] = {}
    for item in (s.strip() for s in str(text).split(",")):
        if not item:
            continue
        if "=" in item:
            key, _, value = item.partition("=")
            key = key.strip().lower().replace("-", "_")
            key = _KEY_ALIASES.get(key, key)
            if key not in COMPONENT_KEYS:
                raise UserError(
                    f"unknown component {key!r} in --weights; "
                    f"use one of: {', '.join(COMPONENT_KEYS)}"
                )
            named[key] = parse_format(value)
        else:
            if bare is not None:
                raise UserError(
                    f"--weights names two formats for everything ({bare.name}, {item}); give one"
                )
            bare = parse_format(item)
    if bare is None and not named:
        raise UserError(
            "--weights is empty; give a format such as fp8 or experts=mxfp4,attention=bf16"
        )
    return bare, named


def resolve_formats(spec: ModelSpec, weights: str | None) -> dict[str, WeightFormat]:
    """The format of every component: the checkpoint's defaults, then --weights on top (which may
    name only components the model has)."""
    defaults: Mapping[str, WeightFormat] | None = spec.default_formats
    if not weights or not str(weights).strip():
        if defaults is None:
            raise UserError(
                f"{spec.name}: {spec.quant_note}; pass --weights FORMAT (e.g. --weights fp8)"
            )
        return dict(defaults)
    bare, named = parse_weight_overrides(weights)
    if defaults is None and bare is None:
        raise UserError(
            f"{spec.name}: {spec.quant_note}; "
            f"add a format for everything, e.g. --weights bf16,{weights}"
        )
    present = {c.key for c in components(spec)}
    missing = sorted(set(named) - present)
    if missing:
        raise UserError(
            f"{spec.name} has no {', '.join(missing)} component; "
            f"it has: {', '.join(sorted(present))}"
        )
    out = dict(defaults) if defaults is not None else {}
    if bare is not None:
        norm_fmt = out.get("norms", parse_format(spec.dtype))
        out = {k: bare for k in COMPONENT_KEYS}
        out["norms"] = norm_fmt if bare.bits_per_weight < 16 else bare
    out.update(named)
    return out
