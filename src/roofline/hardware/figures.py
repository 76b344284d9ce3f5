"""One machine's figures: bandwidth, memory and dense FLOP/s, all devices together.

N devices have N x the bandwidth, memory and FLOP/s of one (`Hardware.scaled`). The catalogue
(`catalogue.hardware_from_entry`) and the measured profile (`local.hardware_from_profile`) both
build this record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Hardware:
    key: str
    name: str
    devices: int  # accelerators the figures below cover
    bandwidth_bytes_per_s: float  # all devices together
    memory_bytes: float  # all devices together
    # dense peak per dtype, all devices together
    flops: Mapping[str, float] = field(default_factory=dict)
    interconnect: str = ""
    interconnect_bytes_per_s: float | None = None
    source: str = ""
    read: str = ""
    vendor_claim: bool = True
    measured: bool = False  # figures measured on this machine by `roofline probe`
    bandwidth_note: str = ""  # how the bandwidth figure was obtained, for the assumptions
    notes: tuple[str, ...] = ()
    unit_devices: int = 1  # devices of the catalogue entry itself (before --gpus)

    @property
    def per_device_bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / self.devices

    def label(self) -> str:
        """'NVIDIA B200 (HGX)', '8 x NVIDIA H100 SXM (80 GB)', or 'NVIDIA GB200 NVL72 (...), 8 of 72
        devices'."""
        if self.devices == self.unit_devices:
            return self.name
        if self.unit_devices == 1:
            return f"{self.devices} x {self.name}"
        return f"{self.name}, {self.devices} of {self.unit_devices} devices"

    def scaled(self, devices: int) -> Hardware:
        """The same accelerator, `devices` of them."""
        if devices == self.devices:
            return self
        f = devices / self.devices
        return replace(
            self,
            devices=devices,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s * f,
            memory_bytes=self.memory_bytes * f,
            flops={k: v * f for k, v in self.flops.items()},
        )
