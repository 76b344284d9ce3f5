"""Finishing records off the hot path: decode the stream, count tokens, write the JSONL line.

When many streams end together (a closed loop of 256 does that every round), decoding them all at
once would hold the event loop for tens of milliseconds, and every chunk still arriving would be
timestamped late. The recorder works through finished requests in the background, one per loop
turn, so reads of live streams are timestamped in between. The next request of a slot is sent
before its predecessor is decoded. With a tokenizer, counting runs in a thread (the Rust tokenizer
releases the GIL).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from roofline.bench.records import RequestRecord
from roofline.bench.tokens import finalize


def finish(rec: RequestRecord, tokenizer: Any = None) -> RequestRecord:
    """Decode a record's raw stream into chunks and token counts (keeping an earlier failure)."""
    if rec.raw_payloads is not None:
        kind, error = rec.error_kind, rec.error
        finalize(rec, rec.raw_events_ns, rec.raw_payloads, rec.saw_done or bool(kind), tokenizer)
        # the transport failure (cut, timeout, cancel) is the reason; chunks that came stay
        if kind:
            rec.error_kind, rec.error = kind, error
        rec.raw_events_ns = rec.raw_payloads = None
    return rec


class Recorder:
    def __init__(self, sink: Callable[[RequestRecord], None], tokenizer: Any = None) -> None:
        self.sink = sink
        self.tokenizer = tokenizer
        self.pending: deque[RequestRecord] = deque()
        self.current: RequestRecord | None = None  # taken from pending, not yet written
        self.wake = asyncio.Event()
        self.stopping = False
        self.task: asyncio.Task | None = None

    def submit(self, rec: RequestRecord) -> None:
        self.pending.append(rec)
        self.wake.set()

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.pending:
                if self.stopping:
                    return
                self.wake.clear()
                await self.wake.wait()
                continue
            rec = self.current = self.pending.popleft()
            if self.tokenizer is not None and rec.raw_payloads:
                await loop.run_in_executor(None, finish, rec, self.tokenizer)
            else:
                finish(rec)
            self.current = None
            self.sink(rec)
            await asyncio.sleep(0)  # let the loop read sockets before the next one

    async def close(self) -> None:
        """Finish everything submitted, stop the background task, and write what is left (also
        when the task was cancelled by an interrupt)."""
        self.stopping = True
        self.wake.set()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        self.flush_now()

    def flush_now(self) -> None:
        if self.current is not None:  # interrupted in the middle of it
            rec, self.current = self.current, None
            self.sink(finish(rec))
        while self.pending:
            self.sink(finish(self.pending.popleft(), self.tokenizer))
