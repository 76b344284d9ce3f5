"""Read a .safetensors file's header, never its tensor data: stdlib only.

Layout (huggingface/safetensors): u64 little-endian N, then N bytes of JSON
`{"name": {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [begin, end]}, ...,
"__metadata__": {...}}`, then the data; offsets count from the end of the header. A header whose
length runs past the file, that is not a JSON object, or whose offsets fall outside the data or
disagree with dtype x shape is refused.

`safetensors_header_length` and `parse_safetensors_header` read from bytes, so a file's first bytes
fetched from the Hub (`modelspec.hub`) go through the same checks as a local file.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.tensor_roles import StoredTensor

# dtype -> bits per element, as the safetensors format names them (sub-byte types pack whole bytes).
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}
MAX_HEADER_BYTES = 100_000_000  # the safetensors library refuses longer headers too


@dataclass(frozen=True)
class SafetensorsHeader:
    source: str  # the file in messages: its path, or its place on the Hub
    tensors: tuple[StoredTensor, ...]
    metadata: dict[str, str]
    file_bytes: int


def _bad(source: str, what: str) -> UserError:
    return UserError(f"{source}: {what}; the file is truncated or not a safetensors file")


def _tensor(source: str, name: str, entry: Any, data_bytes: int) -> tuple[StoredTensor, int, int]:
    if not isinstance(entry, dict):
        raise _bad(source, f"header entry {name!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise _bad(source, f"tensor {name!r} has unknown dtype {str(dtype)[:20]!r}")
    if not isinstance(shape, list) or any(
        isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape
    ):
        raise _bad(source, f"tensor {name!r} has shape {str(shape)[:40]}, not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or any(isinstance(o, bool) or not isinstance(o, int) for o in offsets)
    ):
        raise _bad(
            source, f"tensor {name!r} has data_offsets {str(offsets)[:40]}, not [begin, end]"
        )
    begin, end = offsets
    if not 0 <= begin <= end <= data_bytes:
        raise _bad(
            source,
            f"tensor {name!r} has data at [{begin:,}, {end:,}) but the data holds "
            f"{data_bytes:,} bytes",
        )
    n = 1
    for d in shape:
        n *= d
    n_bits = n * DTYPE_BITS[dtype]
    if n_bits != 8 * (end - begin):
        raise _bad(
            source,
            f"tensor {name!r} ({dtype} {shape}) should take {n_bits / 8:,.0f} bytes "
            f"but its offsets give {end - begin:,}",
        )
    rows = n // shape[-1] if shape and shape[-1] else (1 if not shape else 0)
    tensor = StoredTensor(
        name=name,
        type_name=dtype,
        shape=tuple(shape),
        n_elements=n,
        n_bytes=end - begin,
        row_count=rows,
    )
    return tensor, begin, end


def safetensors_header_length(source: str, head: bytes, size: int) -> int:
    """The JSON header's length in bytes, from the file's first 8 bytes (`head`), checked against
    the file's `size`: a length past the end is a header that lies."""
    if len(head) < 8:
        raise _bad(source, f"{size} bytes is too short for a safetensors header")
    n = struct.unpack_from("<Q", head)[0]
    if n > size - 8 or n > MAX_HEADER_BYTES:
        raise _bad(source, f"the header claims {n:,} bytes but the file has {size:,}")
    return n


def parse_safetensors_header(source: str, raw: bytes, size: int) -> SafetensorsHeader:
    """The tensors (name, dtype, shape, bytes) of a safetensors file of `size` bytes, from its JSON
    header `raw` (the bytes after the 8-byte length)."""
    n = len(raw)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad(source, f"the {n:,}-byte header is not JSON") from None
    if not isinstance(header, dict):
        raise _bad(source, "the header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise _bad(source, "__metadata__ is not an object")
    data_bytes = size - 8 - n
    tensors, spans = [], []
    for name, entry in header.items():
        tensor, begin, end = _tensor(source, name, entry, data_bytes)
        tensors.append(tensor)
        if end > begin:
            spans.append((begin, end, name))
    spans.sort()
    for (_, end_a, a), (begin_b, _, b) in itertools.pairwise(spans):
        if begin_b < end_a:
            raise _bad(source, f"tensors {a!r} and {b!r} overlap")
    return SafetensorsHeader(
        source=source,
        tensors=tuple(tensors),
        metadata={str(k): str(v) for k, v in meta.items()},
        file_bytes=size,
    )


def read_safetensors_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """The tensors (name, dtype, shape, bytes) of a .safetensors file, from its header alone."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = safetensors_header_length(str(p), f.read(8), size)
            raw = f.read(n)
    except OSError as e:
        raise UserError(f"cannot read {p} ({e.strerror or e}); check the path") from None
    return parse_safetensors_header(str(p), raw, size)
