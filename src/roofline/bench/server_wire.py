"""The null and fault servers' bytes on the wire: an SSE event as one HTTP/1.1 chunk, the end of a
chunked body, and a whole response with a length.
"""

from __future__ import annotations


def sse_frame(data: bytes) -> bytes:
    """One SSE event as one HTTP chunk."""
    payload = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(payload), payload)


END_CHUNKED = b"0\r\n\r\n"  # the last chunk of a chunked body
DONE_AND_END = sse_frame(b"[DONE]") + END_CHUNKED


def http_response(
    status: int, body: bytes, ctype: bytes = b"application/json", extra: bytes = b""
) -> bytes:
    reason = {
        200: b"OK",
        400: b"Bad Request",
        404: b"Not Found",
        429: b"Too Many Requests",
        500: b"Internal Server Error",
        503: b"Service Unavailable",
    }.get(status, b"Error")
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        b"Server: roofline-nullserver\r\n%s\r\n%s" % (status, reason, ctype, len(body), extra, body)
    )
