"""Faults the null server can inject, one per request: the failures a benchmark must survive.

A request gets a fault when its prompt contains `[fault:NAME]` (deterministic whatever the load
order), otherwise from the server's `--faults` list cycled over requests in arrival order.

    http_400 http_429 http_500 http_503   an error status with an OpenAI-style error body
    hang          read the request, never answer (the client's timeout must end it)
    cut           stream two events, then drop the connection mid-stream
    malformed     an event whose data is not JSON, inside an otherwise normal stream
    stream_error  a `data: {"error": ...}` event mid-stream (what vLLM sends), then [DONE]
    no_done       stream the tokens, then end the body cleanly with no finish_reason and no [DONE]
    empty         a 200 stream with nothing but [DONE]
    ok            no fault
"""

from __future__ import annotations

import re
from typing import Any

from roofline.bench.server_wire import DONE_AND_END, END_CHUNKED, http_response, sse_frame

FAULTS = (
    "ok",
    "http_400",
    "http_429",
    "http_500",
    "http_503",
    "hang",
    "cut",
    "malformed",
    "stream_error",
    "no_done",
    "empty",
)
_DIRECTIVE = re.compile(r"\[fault:([a-z_0-9]+)\]")


def fault_for(req: dict, faults: list[str], index: int) -> str | None:
    """The fault this request gets (None for a normal answer)."""
    texts = [req.get("prompt")] + [
        m.get("content") for m in req.get("messages") or () if isinstance(m, dict)
    ]
    for t in texts:
        if isinstance(t, str):
            m = _DIRECTIVE.search(t)
            if m and m.group(1) in FAULTS:
                return None if m.group(1) == "ok" else m.group(1)
    if faults:
        f = faults[index % len(faults)]
        return None if f == "ok" else f
    return None


def respond_at_once(fault: str, conn: Any) -> bool:
    """Faults that need no stream; True when handled."""
    if fault.startswith("http_"):
        status = int(fault[5:])
        extra = b"Retry-After: 1\r\n" if status == 429 else b""
        body = b'{"error":{"message":"injected fault %s","type":"fault","code":%d}}' % (
            fault.encode(),
            status,
        )
        conn.send(http_response(status, body, extra=extra))
        return True
    return fault == "hang"


def alter_plan(fault: str, plan: list[tuple], conn: Any) -> list[tuple]:
    """Change a normal stream plan [(due_ns, fn, args)]: head first, the [DONE]+end write last."""
    head, events, done = plan[0], plan[1:-1], plan[-1]
    if fault == "cut":
        kept = events[:3]  # the role event and two token events
        return [head, *kept, (kept[-1][0], conn.abort, ())]
    if fault == "malformed":
        bad = (events[2][0], conn.send, (sse_frame(b"{this is not json"),))
        return [head, *events[:3], bad, *events[3:], done]
    if fault == "stream_error":
        err = (
            sse_frame(b'{"error":{"message":"injected error mid-stream","code":500}}')
            + DONE_AND_END
        )
        return [head, *events[:3], (events[2][0], conn.send, (err,))]
    if fault == "no_done":
        return [head, *events[:-2], (events[-2][0], conn.send, (END_CHUNKED,))]
    if fault == "empty":
        return [head, (head[0], conn.send, (DONE_AND_END,))]
    return plan
