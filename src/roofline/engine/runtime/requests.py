"""One request as the scheduler's callers see it: the events it produces, its usage, its handle, and
a sink that hands events to an asyncio loop. (Re-exported by `runtime.scheduler`.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from roofline.engine.runtime.speculate.adaptive import SpecStats


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Event:
    """What one step produced for one request. The last event has `finish_reason` set."""

    text: str  # newly final text (may be "" while a stop string or a UTF-8 character is forming)
    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None  # "stop" | "length" | "abort" (cancelled) | "error"
    usage: Usage | None = None  # on the last event
    error: str | None = None  # with finish_reason "error"
    spec: SpecStats | None = None  # on the last event: weight passes, drafted and accepted tokens

    @property
    def final(self) -> bool:
        return self.finish_reason is not None


Sink = Callable[[Event], None]


class RequestHandle:
    """The caller's side of one request: its id and a thread-safe `cancel()`."""

    def __init__(self, request_id: int, wake: Callable[[], None]):
        self.request_id = request_id
        self._cancelled = False
        self._wake = wake

    def cancel(self) -> None:
        """Ask the scheduler to drop the request; its slot is freed at the start of the next
        step."""
        self._cancelled = True  # a bool store is atomic; the scheduler thread reads it each step
        self._wake()

    @property
    def cancelled(self) -> bool:
        return self._cancelled


def asyncio_sink(loop: asyncio.AbstractEventLoop) -> tuple[Sink, asyncio.Queue[Event]]:
    """A sink that hands events to `loop` (call it from the loop's thread); read them from the
    queue."""
    queue: asyncio.Queue[Event] = asyncio.Queue()

    def sink(event: Event) -> None:
        # RuntimeError: the loop is closed, nobody is listening any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, event)

    return sink, queue
