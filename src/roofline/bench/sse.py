"""Incremental parser for `text/event-stream` bodies (the WHATWG server-sent-events rules).

Any piece of an event, even a CR LF pair, can be split across reads; `SSEParser.feed` keeps the
tail and returns the `data` of every event the new bytes complete:

- a line ends with CR LF, LF or CR (a CR ending a read is held back: an LF may follow);
- a line starting with ':' is a comment (keep-alive pings), ignored;
- `data:` lines append their value (one leading space dropped), several joined with LF;
- a blank line ends the event; an event with no `data` dispatches nothing;
- of the other fields only `event` is kept (some servers send `event: error`);
- one byte order mark (EF BB BF) at the start is dropped.
Payloads stay bytes: JSON is decoded by the caller, after the timestamp.
"""

from __future__ import annotations

_BOM = b"\xef\xbb\xbf"


class SSEParser:
    __slots__ = ("_data", "_event", "_started", "_tail", "events_named")

    def __init__(self) -> None:
        self._tail = b""  # bytes after the last complete line
        self._data: list[bytes] | None = None  # data lines of the event being read
        self._event = b""  # the `event:` field of the event being read
        self.events_named: list[bytes] = []  # names of events that carried an `event:` field
        # a byte other than a byte order mark was seen (set on the slow path only)
        self._started = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data payloads of the events they complete, in order."""
        if (
            not self._tail
            and self._data is None
            and chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and chunk.count(b"\n") == 2
            and b"\r" not in chunk
        ):
            return [chunk[6:-2]]  # the usual case: exactly one whole one-line event
        buf = self._tail + chunk if self._tail else chunk
        if not self._started:
            # the stream so far is (part of) a byte order mark: wait for more
            if _BOM.startswith(buf):
                self._tail = buf
                return []
            self._started = True
            buf = buf.removeprefix(_BOM)
        if b"\r" in buf:
            # Hold back a trailing CR: it may be the first half of a CR LF pair.
            held = b"\r" if buf.endswith(b"\r") else b""
            if held:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = buf.split(b"\n")
            self._tail = lines.pop() + held
        else:
            lines = buf.split(b"\n")
            self._tail = lines.pop()
        out: list[bytes] = []
        for line in lines:
            if not line:
                if self._data is not None:
                    out.append(b"\n".join(self._data))
                    if self._event:
                        self.events_named.append(self._event)
                self._data = None
                self._event = b""
                continue
            if line[0] == 58:  # b":" comment
                continue
            name, sep, value = line.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                if self._data is None:
                    self._data = [value]
                else:
                    self._data.append(value)
            elif name == b"event":
                self._event = value
        return out

    def close(self) -> list[bytes]:
        """End of stream. An event not closed by a blank line is still returned (lenient servers end
        with `data: [DONE]` and no blank line); the caller decides whether that was complete."""
        if not self._started and _BOM.startswith(self._tail):
            self._tail = b""  # nothing but (part of) a byte order mark
        out = self.feed(b"\n\n") if (self._tail or self._data is not None) else []
        self._tail = b""
        return out

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are held."""
        return bool(self._tail) or self._data is not None
