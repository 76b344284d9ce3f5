"""The run folder: raw per-request JSONL as each request ends, then summary.json and summary.md.

    runs/<YYYYmmdd-HHMMSS>-<label>/
        provenance.json   written first: version, endpoint, model, arguments, hardware, time
        requests.jsonl    one line per request, appended the moment it ends (warm-up ones too,
                          marked "phase": "warmup"; failed and cancelled ones too)
        summary.json      written at the end (or on Ctrl-C) from requests.jsonl
        summary.md        the same, for people

Each line is one `os.write` on a file opened O_APPEND: it reaches the kernel before the next request
is looked at, so Ctrl-C or a kill loses nothing that ended, and worker processes can share the file.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from roofline.bench.records import RequestRecord
from roofline.errors import UserError

REQUESTS = "requests.jsonl"
PROVENANCE = "provenance.json"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"


def default_run_dir(label: str, root: str | Path = "runs") -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:60] or "run"
    return Path(root) / f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}"


def make_run_dir(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create run folder {str(folder)!r} ({e.strerror}); pass --out to a writable "
            "place"
        ) from None
    if (folder / REQUESTS).exists() and (folder / REQUESTS).stat().st_size:
        raise UserError(f"{str(folder)!r} already holds a run ({REQUESTS}); pass another --out")
    return folder


class RequestLog:
    """Appends records to requests.jsonl, one write per line."""

    def __init__(self, path: Path, origin_ns: int) -> None:
        self.origin_ns = origin_ns
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, rec: RequestRecord) -> None:
        data = (json.dumps(rec.to_json(self.origin_ns), separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_requests(folder: Path) -> tuple[list[RequestRecord], int]:
    """The records of requests.jsonl, and how many lines could not be read (a line cut by a kill
    mid-write, or one that is not a request)."""
    records, bad = [], 0
    try:
        text = (folder / REQUESTS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            records.append(RequestRecord.from_json(json.loads(line)))
        except (KeyError, TypeError, ValueError, AttributeError):
            bad += 1
    return records, bad


def write_json(path: Path, obj: Any) -> None:
    """Write atomically (temporary file, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
