"""`ServeOptions`: everything `roofline serve` is told, checked once before anything loads."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from roofline.dtypes import DTYPE_NAMES
from roofline.engine.runtime.prefill_chunks import (
    DEFAULT_PREFILL_CHUNK_MS,
    DEFAULT_PREFILL_CHUNK_TOKENS,
)
from roofline.engine.runtime.prefix_cache import DEFAULT_PREFIX_CACHE_MB
from roofline.engine.serve.http_limits import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES
from roofline.errors import UserError
from roofline.kernel_modes import DEFAULT_KERNELS_MODE, KERNELS_MODES, KernelsMode
from roofline.speculation import SpecOptions


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    model: str | None = None  # a .gguf file or an HF directory; None = the default model
    host: str = "127.0.0.1"
    port: int = 8000  # 0 = any free port
    dtype: str = "stored"
    threads: int | None = None  # None = every usable core
    kernels: KernelsMode = DEFAULT_KERNELS_MODE
    max_batch: int = 4
    max_seq_len: int | None = None  # None = the model's context
    api_key: str | None = None
    served_model_name: str | None = None
    log_level: str = "warning"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    grace_s: float = 10.0
    metrics_require_key: bool = False
    prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB
    prefill_chunk_ms: float = DEFAULT_PREFILL_CHUNK_MS
    prefill_granule: int = DEFAULT_PREFILL_CHUNK_TOKENS
    speculation: SpecOptions = field(default_factory=SpecOptions)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise UserError(f"--dtype must be one of {', '.join(DTYPE_NAMES)}, got {self.dtype!r}")
        if self.kernels not in KERNELS_MODES:
            raise UserError(
                f"--kernels must be one of {', '.join(KERNELS_MODES)}, got {self.kernels!r}"
            )
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must lie in 0..65535, got {self.port}")
        if self.metrics_require_key and not self.api_key:
            raise UserError("--metrics-require-key needs an --api-key")

    @property
    def exposed_without_key(self) -> bool:
        """Reachable from other machines with no API key: anyone who reaches the port may use it."""
        return not self.api_key and not is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """Whether `host` accepts local connections only (a host name other than localhost may resolve
    anywhere, so it counts as not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
