"""`CeilingAnalysis`: every number one ceiling analysis found, typed, with one
`to_json`/`from_json`.

`bounds.analysis.analyse` builds it; `roofline ceiling` prints it (rich, Markdown, `--json`) and
`roofline report` draws it. The JSON keys are the field names, so `to_json` is what `--json` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of d that are fields of cls (older or newer JSON may hold more or fewer)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass(frozen=True)
class ModelFigures:
    name: str
    architecture: str
    params_total: float
    params_active: float
    flops_per_token: float  # 2 x the matmul parameters each decoded token multiplies
    layers: int
    kv_bytes_per_token: float


@dataclass(frozen=True)
class HardwareFigures:
    key: str
    name: str
    label: str
    devices: int
    bandwidth_bytes_per_s: float
    memory_bytes: float
    flops: dict[str, float] = field(default_factory=dict)  # dtype -> dense FLOP/s
    interconnect: str | None = None
    source: str | None = None
    read: str | None = None
    vendor_claim: bool = False
    measured: bool = False


@dataclass(frozen=True)
class ComponentBytes:
    key: str
    label: str
    params: float  # active per token
    params_stored: float
    format: str
    format_label: str
    bits_per_weight: float
    bytes: float  # read per decoded token
    bytes_stored: float
    counted: bool


@dataclass(frozen=True)
class KvFigures:
    format: str
    bytes_per_token: float
    bytes_per_sequence: float


@dataclass(frozen=True)
class DecodeBound:
    seconds_per_token: float
    tok_per_s: float


@dataclass(frozen=True)
class BatchBound:
    batch: int
    seconds_per_step: float
    tok_per_s_per_user: float
    tok_per_s_total: float
    bytes_per_step: float
    resident_bytes: float
    fits: bool
    limited_by: str
    experts_per_layer: float | None = None
    dollars_per_million_tokens: float | None = None


@dataclass(frozen=True)
class TensorParallelBound:
    tp: int
    allreduce_us: float
    seconds_per_token: float
    tok_per_s: float
    stream_seconds: float
    allreduce_seconds: float
    scaling_efficiency: float


@dataclass(frozen=True)
class PrefillBound:
    prompt_tokens: int
    mfu: float
    dtype: str | None
    peak_flops: float
    ttft_seconds: float


@dataclass(frozen=True)
class SpeculativeBound:
    alpha: float
    gamma: int
    draft_cost: float
    tokens_per_pass: float
    speedup: float
    tok_per_s: float
    best_gamma: int
    best_speedup: float


def _opt(cls: type, d: Mapping[str, Any] | None) -> Any:
    return None if not d else cls(**_known(cls, d))


@dataclass(frozen=True)
class CeilingAnalysis:
    model: ModelFigures
    hardware: HardwareFigures
    context_tokens: int
    efficiency: float
    bandwidth_bytes_per_s: float  # usable: the hardware's (or --bandwidth) x efficiency
    components: tuple[ComponentBytes, ...]
    kv: KvFigures
    weight_bytes: float
    small_bytes: float
    bytes_per_token: float
    resident_weight_bytes: float
    decode: DecodeBound
    batches: tuple[BatchBound, ...]
    compute_dtype: str | None = None
    peak_flops: float | None = None
    tensor_parallel: TensorParallelBound | None = None
    prefill: PrefillBound | None = None
    speculative: SpeculativeBound | None = None
    assumptions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["components"] = list(d["components"])
        d["batches"] = list(d["batches"])
        d["assumptions"] = list(d["assumptions"])
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CeilingAnalysis:
        return cls(
            model=ModelFigures(**_known(ModelFigures, d["model"])),
            hardware=HardwareFigures(**_known(HardwareFigures, d["hardware"])),
            context_tokens=int(d.get("context_tokens") or 0),
            efficiency=float(d.get("efficiency", 1.0)),
            bandwidth_bytes_per_s=float(d["bandwidth_bytes_per_s"]),
            components=tuple(
                ComponentBytes(**_known(ComponentBytes, c)) for c in d.get("components") or ()
            ),
            kv=KvFigures(**_known(KvFigures, d["kv"])),
            weight_bytes=float(d["weight_bytes"]),
            small_bytes=float(d.get("small_bytes") or 0.0),
            bytes_per_token=float(d["bytes_per_token"]),
            resident_weight_bytes=float(d.get("resident_weight_bytes") or d["weight_bytes"]),
            decode=DecodeBound(**_known(DecodeBound, d["decode"])),
            batches=tuple(BatchBound(**_known(BatchBound, b)) for b in d.get("batches") or ()),
            compute_dtype=d.get("compute_dtype"),
            peak_flops=d.get("peak_flops"),
            tensor_parallel=_opt(TensorParallelBound, d.get("tensor_parallel")),
            prefill=_opt(PrefillBound, d.get("prefill")),
            speculative=_opt(SpeculativeBound, d.get("speculative")),
            assumptions=tuple(d.get("assumptions") or ()),
        )
