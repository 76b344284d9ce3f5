"""Before a run against a URL: is a server there, and what does it say about itself?

Nothing answering (refused, unresolvable, timeout, not HTTP) stops the run with one line
(`UserError`) instead of a table of failures; any HTTP answer, even an error, is a server. When
neither `--model` nor `--hardware` is given and the model's `/v1/models` entry carries
`"roofline": {"bytes_per_token": N, "hardware": H}` (as `roofline serve` reports), the run is held
against N over H's read bandwidth. H "local" (or none) is measured in the run's window, but only
when the URL's host is this machine (another's cannot be measured from here); any other H is read
as `--hardware` would read it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from roofline.bench.against import LOCAL, hardware_bandwidth_bytes_per_s, plausible_bytes
from roofline.bench.api import choose_model, model_ids, parse_endpoint, roofline_info
from roofline.bench.http1 import FetchError, fetch
from roofline.bench.plan import BenchPlan
from roofline.errors import UserError

PREFLIGHT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServerFacts:
    """What the server said before the run: the listed models and, when its entry carries it, the
    weight bytes read per decoded token and the hardware it runs on."""

    url: str
    status: int  # of GET /v1/models
    models: tuple[str, ...] = ()
    served: str | None = None
    bytes_per_token: float | None = None
    # the entry's `roofline.file_bytes_per_token`: the file's own
    file_bytes_per_token: float | None = None
    # the entry's `roofline.hardware` ("local": the server's own machine)
    hardware: str | None = None
    local: bool = False  # the URL's host is this machine

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "status": self.status,
            "models": list(self.models),
            "served": self.served,
            "bytes_per_token": self.bytes_per_token,
            "file_bytes_per_token": self.file_bytes_per_token,
            "hardware": self.hardware,
            "local": self.local,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ServerFacts:
        return cls(
            url=str(d["url"]),
            status=int(d["status"]),
            models=tuple(d.get("models") or ()),
            served=d.get("served"),
            bytes_per_token=d.get("bytes_per_token"),
            file_bytes_per_token=d.get("file_bytes_per_token"),
            hardware=d.get("hardware"),
            local=bool(d.get("local")),
        )


def bytes_per_token_of(
    info: Mapping[str, Any] | None, key: str = "bytes_per_token"
) -> float | None:
    """The entry's `bytes_per_token` (or another byte count, `key`) when it is a positive finite
    number of plausible size, else None."""
    return plausible_bytes((info or {}).get(key))


def is_this_machine(host: str) -> bool:
    """True when host is a loopback or unspecified address, or resolves to an address of this
    machine (one a socket can bind to)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    for family, _, _, _, addr in infos:
        try:
            ip = ipaddress.ip_address(str(addr[0]).split("%")[0])
        except ValueError:
            continue
        if ip.is_loopback or ip.is_unspecified:
            return True
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def server_facts(plan: BenchPlan, *, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> ServerFacts:
    """GET /v1/models at the plan's URL. UserError (one line) when nothing answers HTTP there."""
    ep = parse_endpoint(plan.url, api=plan.api, api_key=plan.api_key)
    path = f"{ep.base_path}/models"
    try:
        status, _, body = asyncio.run(
            fetch(ep, path, timeout_s=min(timeout_s, plan.timeout_s or timeout_s))
        )
    except FetchError as e:
        raise UserError(
            f"no server answers at {ep.url}: {e}. Start it, or check the host and port"
        ) from None
    models: list[str] = []
    info = None
    if status == 200:
        try:
            listed = json.loads(body)
        except (ValueError, RecursionError):
            listed = None
        models = model_ids(listed)
        served = plan.served_model or choose_model(models, plan.model)
        info = roofline_info(listed, served) if served is not None else None
    else:
        served = plan.served_model or plan.model
    hardware = (info or {}).get("hardware")
    return ServerFacts(
        url=ep.url,
        status=status,
        models=tuple(models),
        served=served,
        bytes_per_token=bytes_per_token_of(info),
        file_bytes_per_token=bytes_per_token_of(info, "file_bytes_per_token"),
        hardware=hardware if isinstance(hardware, str) and hardware.strip() else None,
        local=is_this_machine(ep.host),
    )


def ceiling_hardware(facts: ServerFacts) -> tuple[str | None, str]:
    """(the hardware to hold the run against, a note for the user) for a server that reports its
    bytes per token; (None, why not) when it cannot be held against anything."""
    if facts.bytes_per_token is None:
        return None, ""
    mb = facts.bytes_per_token / 1e6
    if facts.file_bytes_per_token:  # what the file stores beside it: the run is shown against both
        mb_text = (
            f"{mb:,.1f} MB per token (the file stores {facts.file_bytes_per_token / 1e6:,.1f} MB)"
        )
    else:
        mb_text = f"{mb:,.1f} MB per token"
    if facts.hardware not in (None, LOCAL):
        named = facts.hardware[:60]
        try:
            hardware_bandwidth_bytes_per_s(facts.hardware)
        except UserError:
            return None, (
                f"the server reads {mb_text} on hardware {named!r}, which is not known here: "
                "give --hardware NAME (or a bandwidth like 100GB/s) for a ceiling"
            )
        return facts.hardware, f"the server reads {mb_text} on {named} (its /v1/models entry)"
    if not facts.local:
        return None, (
            f"the server reads {mb_text} but runs on another machine, whose bandwidth cannot "
            "be measured from here: "
            "give --hardware NAME (or a bandwidth like 100GB/s) for a ceiling"
        )
    return LOCAL, (
        f"the server reads {mb_text} (its /v1/models entry) on this machine: the run is held "
        "against this machine's measured read bandwidth"
    )


def preflight(
    plan: BenchPlan,
    note: Callable[[str], None] = lambda _: None,
    *,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
) -> BenchPlan:
    """Check that a server answers at the plan's URL (UserError if not) and return the plan to run:
    with the hardware the run is held against when the server reports its bytes per token and the
    user gave neither --model nor --hardware."""
    facts = server_facts(plan, timeout_s=timeout_s)
    if plan.model is not None or plan.hardware is not None:
        return plan
    hardware, text = ceiling_hardware(facts)
    if text:
        note(text)
    if hardware is None:
        return plan
    return replace(
        plan,
        hardware=hardware,
        provenance_extra={**plan.provenance_extra, "ceiling_from_server": facts.to_json()},
    )
