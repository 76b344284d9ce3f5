"""Stopping the server without cutting anyone off mid-chunk.

On SIGTERM or SIGINT: stop accepting connections, answer requests that arrive on open connections
with a JSON 503, give the requests in flight `grace_s` to finish, then end each one still open: a
stream gets an SSE error event and `[DONE]`, a waiting non-streamed request a JSON 503. Only then
does uvicorn close the connections and the lifespan stop the scheduler, so nothing is cancelled
under a running response (the source of the CancelledError tracebacks a plain uvicorn shutdown
logged). A second Ctrl-C ends the grace period at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

import uvicorn

SHUTDOWN = object()  # put into a request's event queue when the grace period is over


class Drain:
    """The requests in flight (counted from the moment their route starts) and their event
    queues."""

    def __init__(self, grace_s: float = 10.0):
        self.grace_s = grace_s
        self.stopping = False
        self.in_flight = 0
        self.ended_early = 0
        self._ended = False
        self._queues: set[asyncio.Queue] = set()

    def begin(self) -> None:
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1

    def watch(self, queue: asyncio.Queue) -> None:
        self._queues.add(queue)
        if self._ended:  # it was still being tokenized when the grace period ran out
            queue.put_nowait(SHUTDOWN)
            self.ended_early += 1

    def unwatch(self, queue: asyncio.Queue) -> None:
        self._queues.discard(queue)

    def end_all(self) -> int:
        """Tell every request still waiting for events that the server stops; returns how many."""
        self._ended = True
        for queue in self._queues:
            queue.put_nowait(SHUTDOWN)
        self.ended_early += len(self._queues)
        return len(self._queues)


class GracefulServer(uvicorn.Server):
    """uvicorn's server with the stop sequence above; a caught signal is not re-raised afterwards,
    so the process can say that it stopped and exit 0."""

    def __init__(self, config: uvicorn.Config, drain: Drain):
        super().__init__(config)
        self.drain = drain

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets=None) -> None:
        drain, loop = self.drain, asyncio.get_running_loop()
        drain.stopping = True
        # stop accepting; open connections still get their answers (a 503 if new)
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        deadline = loop.time() + drain.grace_s
        while drain.in_flight and loop.time() < deadline and not self.force_exit:
            await asyncio.sleep(0.05)
        if drain.in_flight:
            drain.end_all()
            deadline = loop.time() + 5.0
            while drain.in_flight and loop.time() < deadline:
                await asyncio.sleep(0.02)
        # the requests are ended: let uvicorn close the connections and the lifespan
        self.force_exit = False
        await super().shutdown(sockets=None)
