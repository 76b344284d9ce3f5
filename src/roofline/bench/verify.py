"""`roofline bench --verify`: are the greedy outputs under the run's load the ones each prompt gets
alone?

Greedy decoding is a function of the prompt, so an engine that batches exactly gives every request
the same tokens at any concurrency. One whose batched kernels sum in another order (a different
tiling per batch size, split-K, atomics) can flip an argmax a few hundred tokens in, and a check
that only ever sends one request at a time never sees it. After the measured run this sends every
prompt alone (the reference), then `streams` greedy requests at once (the prompts in turn, each at
least once), and compares each loaded output with its prompt's reference through
`bench.engines.compare_outputs`: token ids where the server gives them, else text.

`streams` is the most requests the run keeps in flight: a closed loop's concurrency, an open loop's
--max-concurrency (else every prompt at once). A run whose scenarios all keep one request in flight
has no load to check: nothing is sent and `checked` is 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roofline.errors import UserError

if TYPE_CHECKING:  # summary.py reads the records: the HTTP side loads only when a check runs
    from roofline.bench.engines.greedy import GreedyOutput
    from roofline.bench.plan import BenchPlan
    from roofline.bench.workloads import Prompt

# (url, served model, prompts, max tokens) -> one GreedyOutput per prompt: a launcher's
# `greedy_outputs`, or `bench.engines.greedy.openai_greedy` for a server bench did not start
Greedy = Callable[[str, Any, Sequence[Any], int], Awaitable[list[Any]]]


@dataclass(frozen=True)
class Divergence:
    """Where the first loaded output left its prompt's single-stream reference."""

    prompt: str  # the prompt's id
    position: int  # token index (character index when basis == "text")
    basis: str  # "token_ids" | "text"
    request: int  # which loaded request, counted from 0 in the order they were sent
    reference: str = ""  # a few tokens (or characters) around the divergence, alone
    loaded: str = ""  # the same, under load

    def to_json(self) -> dict:
        return {
            "prompt": self.prompt,
            "position": self.position,
            "basis": self.basis,
            "request": self.request,
            "reference": self.reference,
            "loaded": self.loaded,
        }

    @classmethod
    def from_json(cls, d: dict | None) -> Divergence | None:
        if not d:
            return None
        return cls(
            prompt=str(d["prompt"]),
            position=int(d["position"]),
            basis=str(d.get("basis", "text")),
            request=int(d.get("request", 0)),
            reference=str(d.get("reference", "")),
            loaded=str(d.get("loaded", "")),
        )


@dataclass(frozen=True)
class Verify:
    """summary.json's `"verify"`: loaded outputs checked, how many were identical, the first that
    was not."""

    checked: int
    identical: int
    first_divergence: Divergence | None = None
    streams: int = 1  # requests in flight while the loaded outputs were collected
    basis: str = ""  # "token_ids" when every comparison had ids, else "text" ("" when none ran)
    error: str | None = None  # why the check could not finish (the run's figures still stand)

    @property
    def exact(self) -> bool:
        """Every loaded output identical (vacuously so when none was checked)."""
        return self.error is None and self.identical == self.checked

    def to_json(self) -> dict:
        return {
            "checked": self.checked,
            "identical": self.identical,
            "first_divergence": (
                None if self.first_divergence is None else self.first_divergence.to_json()
            ),
            "streams": self.streams,
            "basis": self.basis,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: dict | None) -> Verify | None:
        if not d:
            return None
        return cls(
            checked=int(d["checked"]),
            identical=int(d["identical"]),
            first_divergence=Divergence.from_json(d.get("first_divergence")),
            streams=int(d.get("streams", 1)),
            basis=str(d.get("basis", "")),
            error=d.get("error"),
        )


def verify_streams(plan: BenchPlan) -> int:
    """The most requests any scenario keeps in flight."""
    return max([1, *(scenario_streams(s, len(plan.prompts)) for s in plan.scenarios)])


def scenario_streams(scenario: Any, n_prompts: int) -> int:
    """The most requests a scenario keeps in flight: a closed loop's concurrency, an open loop's
    --max-concurrency (without one every prompt at once, at least 2), else 1."""
    from roofline.bench.loadgen import ScenarioKind

    if scenario.kind == ScenarioKind.CONCURRENCY:
        return int(scenario.concurrency or 1)
    if scenario.kind == ScenarioKind.RATE:
        return scenario.max_concurrency or max(2, n_prompts)
    return 1


def compare_loaded(
    reference: Sequence[GreedyOutput], loaded: Sequence[GreedyOutput], streams: int
) -> Verify:
    """Each loaded output against its prompt's reference (loaded request i is prompt i mod P)."""
    from roofline.bench.engines.greedy import compare_outputs

    identical, first, bases = 0, None, set()
    for i, out in enumerate(loaded):
        e = compare_outputs([reference[i % len(reference)]], [out])
        bases.add(e.basis)
        if e.exact:
            identical += 1
        elif first is None:
            first = Divergence(
                e.first_prompt or out.prompt_id,
                int(e.first_position or 0),
                e.basis,
                i,
                e.baseline_piece,
                e.candidate_piece,
            )
    basis = "token_ids" if bases == {"token_ids"} else ("text" if bases else "")
    return Verify(len(loaded), identical, first, streams, basis)


async def _outputs(
    greedy: Greedy,
    plan: BenchPlan,
    model: str | None,
    prompts: Sequence[Prompt],
    streams: int,
) -> list[GreedyOutput]:
    """One greedy output per prompt, `streams` requests in flight at a time, in the given order."""
    gate = asyncio.Semaphore(streams)

    async def one(p: Prompt) -> GreedyOutput:
        async with gate:
            outs = await asyncio.wait_for(
                greedy(plan.url, model, [p], p.max_tokens or plan.max_tokens), plan.timeout_s
            )
        if len(outs) != 1:
            raise UserError(f"the server gave {len(outs)} greedy outputs for prompt {p.id!r}")
        return outs[0]

    return list(await asyncio.gather(*(one(p) for p in prompts)))


def run_verify(
    plan: BenchPlan,
    model: str | None,
    greedy: Greedy | None = None,
    note: Callable[[str], Any] = lambda text: None,
    reference: Sequence[GreedyOutput] | None = None,
) -> Verify:
    """Each prompt alone (unless `reference` holds those outputs already, one per prompt in
    order), then max(streams, prompts) requests `streams` at a time, compared. A failed request
    ends the check with `error` set; it never fails the run."""
    streams = verify_streams(plan)
    if streams <= 1 or not plan.prompts:
        return Verify(0, 0, streams=streams)
    if greedy is None:
        from roofline.bench.engines.greedy import openai_greedy

        greedy = openai_greedy
    count = max(streams, len(plan.prompts))
    loaded = [plan.prompts[i % len(plan.prompts)] for i in range(count)]
    alone = f"{len(plan.prompts)} greedy requests one at a time, then " if reference is None else ""
    note(f"verify: {alone}{count} with {streams} in flight")
    try:
        if reference is None:
            reference = asyncio.run(_outputs(greedy, plan, model, plan.prompts, 1))
        outputs = asyncio.run(_outputs(greedy, plan, model, loaded, streams))
    except (UserError, TimeoutError) as e:
        text = str(e) or f"a greedy request took longer than {plan.timeout_s:g} s"
        return Verify(0, 0, streams=streams, error=text)
    return compare_loaded(reference, outputs, streams)


def verify_line(v: Verify) -> str:
    """The terminal's and summary.md's line: how many identical, and where the first diverged."""
    if v.error is not None:
        return f"verify: could not finish ({v.error})"
    if v.checked == 0:
        return (
            "verify: nothing to check: every scenario keeps one request in flight, as the "
            "single-stream reference does"
        )
    basis = "token ids" if v.basis == "token_ids" else "text"
    head = (
        f"verify: {v.identical} of {v.checked} greedy outputs at {v.streams} streams identical "
        f"to their prompt's single-stream output ({basis})"
    )
    d = v.first_divergence
    if d is None:
        return head
    unit = "token" if d.basis == "token_ids" else "character"
    return (
        f"{head}; NOT EXACT UNDER LOAD: prompt {d.prompt!r} first differs at {unit} {d.position} "
        f"(alone: {d.reference!r}; under load: {d.loaded!r})"
    )
