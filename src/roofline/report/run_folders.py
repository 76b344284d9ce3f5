"""A run folder, loaded into types: a bench run (summary.json, requests.jsonl, provenance.json) or a
tune run (tune.json, trials.jsonl). A damaged folder loads as far as it goes; what is missing or cut
is listed in `warnings`, which the report shows on the page and the CLI prints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from roofline.bench.records import RequestRecord
from roofline.bench.results import PROVENANCE, REQUESTS, SUMMARY_JSON, read_requests
from roofline.bench.summary import RunSummary
from roofline.errors import UserError

TUNE_JSON = "tune.json"
TRIALS_JSONL = "trials.jsonl"


class RunKind(StrEnum):
    """Which command wrote a run folder."""

    BENCH = "bench"
    TUNE = "tune"


@dataclass(frozen=True)
class LoadedRun:
    path: Path
    kind: RunKind
    summary: RunSummary | None = None  # bench
    requests: tuple[RequestRecord, ...] = ()  # bench: the readable lines of requests.jsonl
    tune: Any = None  # tune: roofline.tune.result.TuneResult
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def provenance(self) -> Mapping[str, Any]:
        return self.summary.provenance if self.summary else {}


def _read_json(path: Path, warnings: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        warnings.append(f"{path.name} could not be read ({e.__class__.__name__}: {e}); left out")
        return None


def load_run(folder: str | Path) -> LoadedRun:
    path = Path(folder)
    if not path.is_dir():
        raise UserError(
            f"{str(path)!r} is not a folder; give a run folder that bench or tune wrote"
        )
    if (path / TUNE_JSON).exists() or (path / TRIALS_JSONL).exists():
        return _load_tune(path)
    if any((path / n).exists() for n in (SUMMARY_JSON, REQUESTS, PROVENANCE)):
        return _load_bench(path)
    raise UserError(
        f"{str(path)!r} holds no run: expected {SUMMARY_JSON} or {REQUESTS} (bench) or "
        f"{TUNE_JSON} (tune)"
    )


def _load_bench(path: Path) -> LoadedRun:
    warnings: list[str] = []
    prov = _read_json(path / PROVENANCE, warnings)
    if prov is None:
        warnings.append(f"{PROVENANCE} is missing: versions, arguments and hardware are unknown")
        prov = {}
    lines, bad = read_requests(path)
    if not (path / REQUESTS).exists():
        warnings.append(
            f"{REQUESTS} is missing: no per-request charts (latency distributions, per-prompt "
            "spread)"
        )
    if bad:
        warnings.append(
            f"{bad} line(s) of {REQUESTS} could not be read (cut by an interrupted run?) and were "
            "skipped"
        )
    data = _read_json(path / SUMMARY_JSON, warnings)
    if data is not None:
        try:
            summary = RunSummary.from_json(data)
        except (KeyError, TypeError, ValueError) as e:
            warnings.append(
                f"{SUMMARY_JSON} has an unexpected shape ({e}); summarized again from {REQUESTS}"
            )
            summary = None
    else:
        summary = None
    if summary is None:
        from roofline.bench.summarize import summarize

        if data is None:
            warnings.append(
                f"{SUMMARY_JSON} is missing (the run did not finish?): summarized from {REQUESTS}, "
                "without the ceiling"
            )
        summary = summarize(lines, provenance=prov, unreadable_lines=bad)
    elif bad and not summary.unreadable_lines:
        summary = replace(summary, unreadable_lines=bad)
    if summary.interrupted:
        warnings.append("the run was interrupted: it covers the requests that ended")
    if summary.requests_ok == 0:
        warnings.append("no successful request in this run: nothing measured to chart")
    return LoadedRun(
        path, RunKind.BENCH, summary=summary, requests=tuple(lines), warnings=tuple(warnings)
    )


def _load_tune(path: Path) -> LoadedRun:
    from roofline.tune.objectives import DEFAULT_OBJECTIVE, objective_info
    from roofline.tune.records import StudyInfo
    from roofline.tune.result import TuneResult
    from roofline.tune.trial_result import TrialResult

    warnings: list[str] = []
    data = _read_json(path / TUNE_JSON, warnings)
    if data is not None:
        try:
            return LoadedRun(
                path, RunKind.TUNE, tune=TuneResult.from_json(data), warnings=tuple(warnings)
            )
        except (KeyError, TypeError, ValueError) as e:
            warnings.append(
                f"{TUNE_JSON} has an unexpected shape ({e}); read {TRIALS_JSONL} instead"
            )
    trials, bad = [], 0
    try:
        text = (path / TRIALS_JSONL).read_text(encoding="utf-8")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.strip():
            try:
                trials.append(TrialResult.from_json(json.loads(line)))
            except (KeyError, TypeError, ValueError):
                bad += 1
    if data is None:
        warnings.append(
            f"{TUNE_JSON} is missing (the run did not finish?): the trials of {TRIALS_JSONL} only, "
            "no ladder or best"
        )
    if bad:
        warnings.append(f"{bad} line(s) of {TRIALS_JSONL} could not be read and were skipped")
    first = trials[0] if trials else None
    result = TuneResult(
        engine=first.engine if first else "?",
        model=None,
        strategy="?",
        objective=objective_info(first.objective if first else DEFAULT_OBJECTIVE),
        space={},
        study=StudyInfo(),
        run_dir=str(path),
        trials=tuple(trials),
        interrupted=True,
    )
    return LoadedRun(path, RunKind.TUNE, tune=result, warnings=tuple(warnings))


@dataclass(frozen=True)
class Loaded:
    """Several runs for one report, and every warning met on the way."""

    runs: tuple[LoadedRun, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)


def load_runs(folders: list[str | Path]) -> Loaded:
    runs = tuple(load_run(f) for f in folders)
    warnings = tuple(f"{r.name}: {w}" if len(runs) > 1 else w for r in runs for w in r.warnings)
    return Loaded(runs, warnings)
