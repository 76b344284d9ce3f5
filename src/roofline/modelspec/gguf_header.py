"""Read a GGUF file's header and tensor infos, never its tensor data: stdlib only (struct, mmap).

GGUF v2/v3 layout (little-endian), as ggml's gguf.cpp writes it:

    "GGUF"  u32 version  u64 tensor_count  u64 kv_count
    kv_count x   (string key, u32 value_type, value)          string = u64 length + UTF-8 bytes
                 value_type: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
                 9 array (u32 item_type, u64 count, items), 10 u64, 11 i64, 12 f64
    tensor_count x (string name, u32 n_dims, n_dims x u64 dims (ne0 first), u32 ggml type,
                    u64 offset)
    padding to `general.alignment` (default 32), then the tensor data; offsets count from there.

`parse_gguf_header` reads from the file's first bytes, all of them (a local file, mmapped) or a
prefix (range reads from the Hub, `modelspec.hub`): a prefix that ends inside the header raises
`GgufHeaderCut` with how far the parse needs, so the caller can fetch more and parse again. A
length that runs past the file itself is never fetched: the header lies, and says so.

A tensor of type T and n elements takes n / block(T) x bytes(T) bytes (`data/ggml_types.toml`).
Arrays are skipped unbuilt (a vocabulary is 50k-250k strings), except numeric ones of up to
`_KEPT_ITEMS` items: some architectures give per-layer values as arrays; `whole_arrays` builds
them all (the engine's loader: its tokenizer needs the vocabulary). gguf's own reader took 2.6 s
to build the shipped file's header, this one 0.1 s (docs/measured.md).
"""

from __future__ import annotations

import mmap
import os
import struct
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.modelspec.tensor_roles import StoredTensor

MAGIC = b"GGUF"
_MAX_DIMS = 4  # GGML_MAX_DIMS
_KEPT_ITEMS = 4096
_DEFAULT_ALIGNMENT_BYTES = 32
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# value type -> (struct code, bytes); 8 string and 9 array are read apart
_SCALARS = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GgmlType:
    type_id: int
    name: str
    block_elements: int
    block_bytes: int


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array: its item type and length; the items only when numeric and short."""

    item_type: int
    count: int
    items: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class GgufHeader:
    source: str  # the file in messages: its path, or its place on the Hub
    version: int
    metadata: dict[str, Any]  # scalars as Python values, strings decoded, arrays as ArrayValue
    tensors: tuple[StoredTensor, ...]
    alignment_bytes: int
    data_offset_bytes: int  # where the tensor data starts
    file_bytes: int
    tensor_offsets_bytes: tuple[int, ...]  # where each tensor's data starts in the file


@cache
def ggml_types() -> dict[int, GgmlType]:
    """Type id -> GgmlType, from data/ggml_types.toml."""
    text = (resources.files("roofline") / "data" / "ggml_types.toml").read_text(encoding="utf-8")
    table = tomllib.loads(text)["types"]
    return {v["id"]: GgmlType(v["id"], name, v["block"], v["bytes"]) for name, v in table.items()}


def _corrupt(source: str, what: str) -> UserError:
    return UserError(f"{source}: {what}; the file is corrupt")


class _Cut(Exception):
    """The file ended before the header did."""


class GgufHeaderCut(Exception):
    """The bytes given are a prefix of the file that ends inside the header."""

    def __init__(self, needed_bytes: int) -> None:
        super().__init__(f"the header needs at least {needed_bytes:,} bytes")
        self.needed_bytes = needed_bytes  # the end of the read that did not fit


class _Reader:
    """Reads `buf`, the first `len(buf)` bytes of a file of `size` bytes."""

    def __init__(self, buf: bytes | mmap.mmap, size: int) -> None:
        self.buf, self.size, self.have, self.pos = buf, size, len(buf), 0

    def _need(self, end: int) -> None:
        if end > self.size:  # the file itself ends first: truncated, or a length that lies
            raise _Cut
        if end > self.have:  # only the prefix given ends first: more bytes would go on
            raise GgufHeaderCut(end)

    def take(self, n: int) -> int:
        """Advance past n bytes; the offset they start at."""
        start = self.pos
        if n < 0:
            raise _Cut
        self._need(start + n)
        self.pos = start + n
        return start

    def u32(self) -> int:
        return _U32.unpack_from(self.buf, self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack_from(self.buf, self.take(8))[0]

    def raw_string(self) -> bytes:
        n = self.u64()
        start = self.take(n)
        return self.buf[start : start + n]

    def string(self) -> str:
        return self.raw_string().decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        buf, pos, have, unpack = self.buf, self.pos, self.have, _U64.unpack_from
        for _ in range(count):
            if pos + 8 > have:
                self._need(pos + 8)
            pos += 8 + unpack(buf, pos)[0]
        self._need(pos)
        self.pos = pos


def _value(r: _Reader, vtype: int, where: str, source: str, whole: bool = False) -> Any:
    if vtype in _SCALARS:
        code, n = _SCALARS[vtype]
        return struct.unpack_from("<" + code, r.buf, r.take(n))[0]
    if vtype == _STRING:
        return r.string()
    if vtype != _ARRAY:
        raise _corrupt(source, f"metadata {where!r} has unknown value type {vtype}")
    item_type, count = r.u32(), r.u64()
    if item_type in _SCALARS:
        code, n = _SCALARS[item_type]
        start = r.take(count * n)
        if count > _KEPT_ITEMS and not whole:
            return ArrayValue(item_type, count)
        return ArrayValue(item_type, count, struct.unpack_from(f"<{count}{code}", r.buf, start))
    if count > r.size:  # each item takes a byte at least
        raise _Cut
    if item_type == _STRING:
        if whole:
            return ArrayValue(item_type, count, tuple(r.string() for _ in range(count)))
        r.skip_strings(count)
        return ArrayValue(item_type, count)
    if item_type == _ARRAY:  # arrays of arrays: allowed by the format, walked item by item
        items = tuple(_value(r, _ARRAY, where, source, whole) for _ in range(count))
        return ArrayValue(item_type, count, items if whole else None)
    raise _corrupt(source, f"metadata {where!r} is an array of unknown type {item_type}")


def _check_version(source: str, head: bytes) -> int:
    if head[:4] != MAGIC:
        raise UserError(f"{source} is not a GGUF file (it does not start with 'GGUF')")
    version = _U32.unpack_from(head, 4)[0]
    if version in (2, 3):
        return version
    if version & 0xFFFF == 0 and (version >> 24) in (2, 3):
        raise UserError(f"{source} is a big-endian GGUF; roofline reads little-endian GGUF files")
    if version == 1:
        raise UserError(
            f"{source} is GGUF v1 (2023), which roofline does not read; convert it again"
        )
    raise UserError(f"{source} is GGUF version {version}; roofline reads versions 2 and 3")


def _tensor(r: _Reader, source: str, types: dict[int, GgmlType]) -> tuple[StoredTensor, int]:
    """One tensor info, and the offset of its data (from the start of the data section)."""
    try:
        name = r.raw_string().decode("utf-8")
    except UnicodeDecodeError:
        raise _corrupt(source, "a tensor name is not UTF-8") from None
    n_dims = r.u32()
    if n_dims > _MAX_DIMS:
        raise _corrupt(source, f"tensor {name!r} has {n_dims} dimensions (at most {_MAX_DIMS})")
    dims = struct.unpack_from(f"<{n_dims}Q", r.buf, r.take(8 * n_dims))
    type_id, offset = r.u32(), r.u64()
    t = types.get(type_id)
    if t is None:
        raise UserError(
            f"{source}: tensor {name!r} has unknown GGML type id {type_id} "
            "(data/ggml_types.toml lists the types ggml knows); is the file corrupt or "
            "from a newer llama.cpp?"
        )
    n = 1
    for d in dims:
        n *= d
    if n >= 2**62:
        raise _corrupt(source, f"tensor {name!r} claims {n:,} elements")
    ne0 = dims[0] if dims else 1
    if ne0 % t.block_elements:
        raise _corrupt(
            source,
            f"tensor {name!r} has rows of {ne0} elements, not a multiple of "
            f"{t.name}'s block of {t.block_elements}",
        )
    tensor = StoredTensor(
        name=name,
        type_name=t.name,
        shape=tuple(dims),
        n_elements=n,
        n_bytes=n // t.block_elements * t.block_bytes,
        row_count=n // ne0 if ne0 else 0,
    )
    return tensor, offset


def _alignment(source: str, metadata: dict[str, Any]) -> int:
    a = metadata.get("general.alignment", _DEFAULT_ALIGNMENT_BYTES)
    if isinstance(a, bool) or not isinstance(a, int) or a <= 0 or a & (a - 1):
        raise _corrupt(source, f"general.alignment is {a!r}, not a power of two")
    return a


def parse_gguf_header(
    source: str, buf: bytes | mmap.mmap, size: int, whole_arrays: bool = False
) -> GgufHeader:
    """The header and tensor infos from `buf`, the first bytes of a GGUF file of `size` bytes (the
    whole file, or a prefix: GgufHeaderCut when it ends inside the header). UserError (one line,
    naming `source`) for a file that is not GGUF, is truncated or is corrupt. whole_arrays: every
    array's items (module docstring)."""
    if size < 24:
        raise UserError(
            f"{source}: {size} bytes is too short for a GGUF header; the file is truncated"
        )
    if len(buf) < 24:
        raise GgufHeaderCut(24)
    r = _Reader(buf, size)
    version = _check_version(source, buf[:8])
    r.take(8)
    n_tensors, n_kv = r.u64(), r.u64()
    if n_tensors > size // 24 or n_kv > size // 12:  # each takes at least that many bytes
        raise UserError(
            f"{source}: the header claims {n_tensors:,} tensors and {n_kv:,} metadata "
            f"keys, more than {size:,} bytes can hold; the file is truncated or "
            "corrupt"
        )
    metadata: dict[str, Any] = {}
    where = "the metadata"
    try:
        for _ in range(n_kv):
            try:
                key = r.raw_string().decode("utf-8")
            except UnicodeDecodeError:
                raise _corrupt(source, "a metadata key is not UTF-8") from None
            metadata[key] = _value(r, r.u32(), key, source, whole_arrays)
        where = "the tensor infos"
        types = ggml_types()
        tensors: list[StoredTensor] = []
        offsets: list[int] = []
        for _ in range(n_tensors):
            tensor, offset = _tensor(r, source, types)
            tensors.append(tensor)
            offsets.append(offset)
    except _Cut:
        raise UserError(
            f"{source}: the file ends inside {where} (it has {size:,} bytes); it is "
            "truncated or not a whole GGUF file"
        ) from None
    alignment = _alignment(source, metadata)
    data_start = -(-r.pos // alignment) * alignment
    seen: set[str] = set()
    for t, offset in zip(tensors, offsets):
        if t.name in seen:
            raise _corrupt(source, f"tensor {t.name!r} appears twice")
        seen.add(t.name)
        if offset % alignment:
            raise _corrupt(
                source,
                f"tensor {t.name!r} starts at offset {offset:,}, not a "
                f"multiple of the alignment {alignment}",
            )
        end = data_start + offset + t.n_bytes
        if end > size:
            raise UserError(
                f"{source}: tensor {t.name!r} ends at byte {end:,} but the file has "
                f"{size:,} bytes; it is truncated (an interrupted download?)"
            )
    return GgufHeader(
        source=source,
        version=version,
        metadata=metadata,
        tensors=tuple(tensors),
        alignment_bytes=alignment,
        data_offset_bytes=data_start,
        file_bytes=size,
        tensor_offsets_bytes=tuple(data_start + o for o in offsets),
    )


def read_gguf_header(path: str | os.PathLike[str], whole_arrays: bool = False) -> GgufHeader:
    """The header and tensor infos of a GGUF file; UserError (one line, naming the file) for a file
    that is not GGUF, is truncated or is corrupt. Reads no tensor data."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:  # mmap refuses an empty file; the parse says what is wrong
                return parse_gguf_header(str(p), f.read(), size, whole_arrays)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return parse_gguf_header(str(p), buf, size, whole_arrays)
    except OSError as e:
        raise UserError(f"cannot read {p} ({e.strerror or e}); check the path") from None
