"""The decode ceiling: one weight pass per token at batch 1, limited by memory bandwidth.

    seconds_per_token >= bytes_per_token / bandwidth_bytes_per_s
    tok_per_s         <= bandwidth_bytes_per_s / bytes_per_token

`Ceiling` is what the other legs (bench, tune, report) hold a measurement against. When the bytes
per token are what an engine reads at its own format, `file_bytes_per_token` (when known) is what
the model's file stores, counted the same way: the second ceiling, bandwidth / file bytes, which a
measurement is shown against too (an engine that expands a 4-bit file to fp32 reads several times
what it must).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ceiling:
    bytes_per_token: float  # weights (+ KV at the stated context) read per decoded token
    bandwidth_bytes_per_s: float  # the bandwidth assumed (peak from the catalogue, or measured)
    model: str = ""
    hardware: str = ""
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    file_bytes_per_token: float | None = (
        None  # the weights as the model's file stores them, when known
    )

    @property
    def seconds_per_token(self) -> float:
        return self.bytes_per_token / self.bandwidth_bytes_per_s

    @property
    def tok_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / self.bytes_per_token

    def percent_of_ceiling(self, measured_tok_per_s: float) -> float:
        """Measured decode rate as a percentage of the bound."""
        return 100.0 * measured_tok_per_s / self.tok_per_s

    @property
    def file_tok_per_s(self) -> float | None:
        """The ceiling of the file's own bytes: bandwidth / file_bytes_per_token (None when not
        known)."""
        return (
            self.bandwidth_bytes_per_s / self.file_bytes_per_token
            if self.file_bytes_per_token
            else None
        )

    @property
    def read_ratio(self) -> float | None:
        """Bytes read per token over the file's: 5.57 when an engine expands a 4-bit file to
        fp32."""
        return (
            self.bytes_per_token / self.file_bytes_per_token if self.file_bytes_per_token else None
        )

    def percent_of_file_ceiling(self, measured_tok_per_s: float) -> float | None:
        """Measured decode rate as a percentage of the file's ceiling (None when the file's bytes
        are unknown)."""
        c = self.file_tok_per_s
        return 100.0 * measured_tok_per_s / c if c else None

    def effective_bandwidth_bytes_per_s(self, measured_tok_per_s: float) -> float:
        """The bandwidth the engine actually used if every token read bytes_per_token."""
        return measured_tok_per_s * self.bytes_per_token

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "hardware": self.hardware,
            "bytes_per_token": self.bytes_per_token,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "seconds_per_token": self.seconds_per_token,
            "tok_per_s": self.tok_per_s,
            "assumptions": list(self.assumptions),
            **(
                {
                    "file_bytes_per_token": self.file_bytes_per_token,
                    "file_tok_per_s": self.file_tok_per_s,
                }
                if self.file_bytes_per_token
                else {}
            ),
        }
