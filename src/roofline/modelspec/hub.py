"""A model on the Hugging Face Hub: `owner/name[:quant]` at a revision -> its ModelSpec and bytes
per token from headers alone, or its files downloaded for the engine.

    list the repo        model_info at the revision: the commit sha, every file and its size
    pick the files       `hub_files.choose_gguf`: a GGUF by its quant tag, else config.json
    read the headers     HTTP range reads of each file's first bytes, never the whole file:
                           safetensors  64 KiB, then the rest of the JSON header if it is longer
                           GGUF         64 KiB, grown (x4, or to what the cut read needs) until
                                        the tensor infos end; at most 64 MiB
                         parsed by the same parsers as a local file (`gguf_header`,
                         `safetensors_header`), counted by the same rule (`files.count_weights`)

The ecosystem's conventions come with huggingface_hub: the HF cache and HF_HOME, HF_TOKEN or the
stored login (`hf auth login`) for gated and private repos, HF_ENDPOINT for mirrors, HF_HUB_OFFLINE
for no network, a progress bar and resumed transfers for downloads. The header bytes read and the
repo's listing are kept under huggingface_hub's assets cache (HF_HOME/assets/roofline/hub/...), so
that a commit read once needs no network again and HF_HUB_OFFLINE=1 works from it; a file already
downloaded into the HF cache is read there. Every failure is one UserError line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from roofline.errors import UserError
from roofline.modelspec.files import (
    FileWeights,
    bytes_text,
    count_weights,
    spec_with_file_weights,
)
from roofline.modelspec.gguf_header import GgufHeader, GgufHeaderCut, parse_gguf_header
from roofline.modelspec.hub_files import GgufModel, choose_gguf
from roofline.modelspec.model import ModelSpec
from roofline.modelspec.model_files import (
    INDEX_NAME,
    ModelFiles,
    default_shard_names,
    gguf_model_files,
    index_shard_names,
    safetensors_model_files,
)
from roofline.modelspec.parse import read_config_file, spec_from_config
from roofline.modelspec.safetensors_header import (
    SafetensorsHeader,
    parse_safetensors_header,
    safetensors_header_length,
)

FIRST_RANGE_BYTES = 64 * 1024  # most safetensors headers and small GGUF headers fit in one read
GGUF_RANGE_GROWTH = 4  # a GGUF header (vocabulary included) takes a few MB: few round trips
MAX_GGUF_HEADER_BYTES = 64 * 2**20  # a 256k vocabulary and its merges are well under it
# what the engine reads from a safetensors repo besides the weights
ENGINE_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    INDEX_NAME,
)
_HUB_ID = re.compile(
    r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?::(?P<quant>[^\s:]+))?", re.ASCII
)
_NOT_A_REPO = (".json", ".gguf", ".safetensors", "-", ".")  # file names, and what the Hub refuses
_COMMIT = re.compile(r"[0-9a-f]{40}")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@dataclass(frozen=True)
class HubId:
    """A model named on the Hub: its repo, and the quant tag or file name after a colon."""

    repo_id: str
    quant: str | None = None

    def __str__(self) -> str:
        return self.repo_id + (f":{self.quant}" if self.quant else "")


def parse_hub_id(text: str) -> HubId | None:
    """`owner/name` or `owner/name:QUANT` as the Hub spells repo ids; None for anything else (a
    path such as ./x or a/b.json, a catalogue alias without a slash)."""
    m = _HUB_ID.fullmatch(text.strip())
    if m is None:
        return None
    repo = m.group("repo")
    if repo.lower().endswith(_NOT_A_REPO) or "--" in repo or ".." in repo:
        return None
    return HubId(repo, m.group("quant"))


@dataclass(frozen=True)
class HubRevision:
    """One commit of a repo: its sha and every file in it with its size in bytes (-1: unknown)."""

    repo_id: str
    sha: str
    file_bytes: Mapping[str, int]

    @property
    def source(self) -> str:
        return f"hub: {self.repo_id}@{self.sha}"


@dataclass(frozen=True)
class HubModel:
    """What the Hub gave for one model argument: the spec and, from headers, the file weights."""

    asked: str  # the model argument as given
    revision: HubRevision
    spec: ModelSpec
    weights: FileWeights | None  # None: a config.json with no safetensors beside it
    files: tuple[str, ...]  # the repo's files whose headers were read
    fetched_bytes: int  # header bytes range reads fetched in this call (0: all from the cache)


# ------------------------------------------------------------------------------------ failures
def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _not_cached(asked: str, repo_id: str, what: str) -> UserError:
    return UserError(
        f"{asked}: HF_HUB_OFFLINE=1 and {what} of the Hub repo {repo_id} is not in the cache; "
        "run once with the network (HF_HUB_OFFLINE unset) to fill it"
    )


def _is_transport_error(e: BaseException) -> bool:
    """The HTTP client's own connection and timeout errors: httpx2's or httpx's (huggingface_hub
    1.x and later), requests' (before)."""
    for module in ("httpx2", "httpx"):
        mod = sys.modules.get(module)
        if mod is not None and isinstance(e, mod.TransportError):
            return True
    return type(e).__module__.startswith(("requests.", "urllib3."))


@contextlib.contextmanager
def _hub_errors(asked: str, repo_id: str, revision: str | None) -> Iterator[None]:
    """huggingface_hub's exceptions (several lines each) as one UserError line that says what to
    do."""
    from huggingface_hub import errors, get_token

    endpoint = _endpoint()
    try:
        yield
    except UserError:
        raise
    except errors.GatedRepoError:
        page = f"{endpoint}/{repo_id}"
        if get_token():
            raise UserError(
                f"{repo_id} is a gated repo and the token in use has no access to it: accept its "
                f"conditions at {page} (with the account the token belongs to)"
            ) from None
        raise UserError(
            f"{repo_id} is a gated repo: accept its conditions at {page}, then log in with "
            "`hf auth login` or set HF_TOKEN"
        ) from None
    except errors.RepositoryNotFoundError:
        raise UserError(
            f"unknown model {asked!r}: not a local file or folder, not a catalogue name (`roofline "
            f"models list`), and {endpoint} has no model repo {repo_id} (a private one needs `hf "
            "auth login` or HF_TOKEN)"
        ) from None
    except errors.RevisionNotFoundError:
        raise UserError(
            f"{repo_id} has no revision {revision!r}; give a branch, a tag or a commit sha"
        ) from None
    except errors.OfflineModeIsEnabled:
        raise _not_cached(asked, repo_id, "what this needs") from None
    except errors.LocalEntryNotFoundError:
        if _offline():
            raise _not_cached(asked, repo_id, "a file") from None
        raise _unreachable(repo_id, endpoint, "no answer") from None
    except errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "an error"
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise UserError(f"the Hub at {endpoint} answered {status} for {repo_id}: {first}") from None
    except Exception as e:
        if _is_transport_error(e):
            raise _unreachable(repo_id, endpoint, type(e).__name__) from None
        if isinstance(e, OSError):  # the cache on this disk: full, read-only, ...
            why = e.strerror or (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"{repo_id}: {why}") from None
        raise


def _unreachable(repo_id: str, endpoint: str, why: str) -> UserError:
    return UserError(
        f"cannot reach the Hub at {endpoint} for {repo_id} ({why}); check the network (or "
        "HF_ENDPOINT), or set HF_HUB_OFFLINE=1 to use what is in the cache"
    )


# ------------------------------------------------------------------------------ the repo listed
def _assets(repo_id: str) -> Path:
    """roofline's folder for this repo in huggingface_hub's assets cache (HF_ASSETS_CACHE, by
    default HF_HOME/assets), read when this call runs so that HF_HOME set later still counts."""
    from huggingface_hub import cached_assets_path, constants
    from huggingface_hub.file_download import repo_folder_name

    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    return cached_assets_path(
        "roofline", namespace="hub", subfolder=folder, assets_dir=constants.HF_ASSETS_CACHE
    )


def _write_atomic(path: Path, data: bytes) -> None:
    """Readers never see half a file: written beside, then renamed over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _save_revision(rev: HubRevision, revision: str) -> None:
    folder = _assets(rev.repo_id)
    _write_atomic(folder / "refs" / quote(revision, safe=""), rev.sha.encode())
    listing = json.dumps(dict(rev.file_bytes), sort_keys=True).encode()
    _write_atomic(folder / rev.sha / "files.json", listing)


def _cached_revision(repo_id: str, revision: str) -> HubRevision | None:
    """The revision as last listed here, from roofline's assets, else from the HF cache (its
    refs and a snapshot's files: what `hf download` or `generate` brought)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    folder = _assets(repo_id)
    ref = folder / "refs" / quote(revision, safe="")
    sha = revision if _COMMIT.fullmatch(revision) else None
    if sha is None and ref.is_file():
        sha = ref.read_text().strip()
    if sha is not None and (folder / sha / "files.json").is_file():
        listing = json.loads((folder / sha / "files.json").read_text(encoding="utf-8"))
        return HubRevision(repo_id, sha, {str(k): int(v) for k, v in listing.items()})
    cache = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    hf_ref = cache / "refs" / revision
    if sha is None and hf_ref.is_file():
        sha = hf_ref.read_text().strip()
    snapshot = cache / "snapshots" / sha if sha else None
    if snapshot is None or not snapshot.is_dir():
        return None
    files = {
        p.relative_to(snapshot).as_posix(): p.stat().st_size
        for p in sorted(snapshot.rglob("*"))
        if p.is_file()
    }
    return HubRevision(repo_id, sha, files)


def _timeout_s() -> float:
    from huggingface_hub import constants

    return float(getattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 10))


def _list_revision(asked: str, repo_id: str, revision: str | None) -> HubRevision:
    """The repo at `revision` (None: main) from the Hub, or with HF_HUB_OFFLINE=1 from the cache.
    Call inside `_hub_errors`."""
    name = revision or "main"
    if _offline():
        rev = _cached_revision(repo_id, name)
        if rev is None:
            from huggingface_hub import constants

            raise UserError(
                f"unknown model {asked!r}: not a local file or folder, not a catalogue name, and "
                f"with HF_HUB_OFFLINE=1 the Hub repo {repo_id}@{name} is not in the cache "
                f"({constants.HF_HOME}); unset HF_HUB_OFFLINE to fetch it"
            )
        return rev
    from huggingface_hub import HfApi

    info = HfApi().model_info(repo_id, revision=revision, files_metadata=True, timeout=_timeout_s())
    sizes = {s.rfilename: (s.size if s.size is not None else -1) for s in info.siblings or ()}
    rev = HubRevision(repo_id, str(info.sha), sizes)
    _save_revision(rev, name)
    return rev


# ------------------------------------------------------------------------- the files' first bytes
def _streamed_get(url: str, headers: dict[str, str]) -> contextlib.AbstractContextManager[Any]:
    """A GET whose body is read as it comes: httpx's stream (huggingface_hub 1.x and later), a
    requests stream before."""
    from huggingface_hub import get_session

    session = get_session()
    if hasattr(session, "stream"):
        return session.stream("GET", url, headers=headers, timeout=_timeout_s())
    return contextlib.closing(session.get(url, headers=headers, timeout=_timeout_s(), stream=True))


def _body_chunks(response: Any) -> Iterator[bytes]:
    if hasattr(response, "iter_bytes"):
        return response.iter_bytes()
    return response.iter_content(chunk_size=65536)


class _Prefixes:
    """The first bytes of one commit's files: from roofline's assets cache, from a copy already in
    the HF cache, or fetched by range reads (and then kept). Counts the bytes fetched."""

    def __init__(self, rev: HubRevision, asked: str) -> None:
        self.rev, self.asked = rev, asked
        self.sizes = dict(rev.file_bytes)
        self.folder = _assets(rev.repo_id) / rev.sha / "heads"
        self.fetched_bytes = 0

    def label(self, name: str) -> str:
        return f"{self.rev.source}/{name}"

    def read(self, name: str, n_bytes: int) -> tuple[bytes, int]:
        """(at least the first `n_bytes` of the file, or all of it; the file's size)."""
        kept = self.folder / quote(name, safe="")
        size = self.sizes.get(name, -1)
        # of a file of unknown size, the kept bytes cannot say whether they are all of it
        have = kept.read_bytes() if kept.is_file() and size >= 0 else b""
        if size >= 0 and len(have) >= min(n_bytes, size):
            return have, size
        local = self._downloaded(name)
        if local is not None:
            with open(local, "rb") as f:
                return f.read(max(n_bytes, len(have))), os.fstat(f.fileno()).st_size
        if _offline():
            raise _not_cached(self.asked, self.rev.repo_id, f"the header of {name}")
        end = n_bytes if size < 0 else min(n_bytes, size)
        data, size = self._fetch(name, len(have), end)
        self.sizes[name] = size
        have += data
        _write_atomic(kept, have)
        return have, size

    def _downloaded(self, name: str) -> str | None:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(self.rev.repo_id, name, revision=self.rev.sha)
        return found if isinstance(found, str) else None

    def _fetch(self, name: str, start: int, end: int) -> tuple[bytes, int]:
        """Bytes [start, end) of the file and its size, by one range read. A server that ignores
        the range is read no further than `end` either."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

        headers = build_hf_headers()
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers["Accept-Encoding"] = "identity"  # the file's own bytes, not a compressed copy
        url = hf_hub_url(self.rev.repo_id, name, revision=self.rev.sha)
        with _streamed_get(url, headers) as response:
            if response.status_code >= 400:
                getattr(response, "read", lambda: None)()  # the error's body, for its message
            hf_raise_for_status(response)
            ranged = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
            if ranged is not None and int(ranged.group(1)) != start:
                raise UserError(f"{self.label(name)}: the Hub answered a range read out of place")
            skip = 0 if ranged is not None else start  # a whole-file answer starts at byte 0
            want = end - start
            body = bytearray()
            for chunk in _body_chunks(response):
                body += chunk
                if len(body) >= skip + want:
                    break
            length = response.headers.get("Content-Length")
        self.fetched_bytes += len(body)
        if ranged is not None:
            size = int(ranged.group(3))
        else:
            size = int(length) if length is not None and length.isdigit() else len(body)
        data = bytes(body[skip : skip + want])
        if len(data) < min(want, size - start):
            raise UserError(
                f"{self.label(name)}: the Hub sent {len(data):,} of the {want:,} bytes asked; "
                "try again"
            )
        return data, size


def _gguf_header(prefixes: _Prefixes, name: str) -> GgufHeader:
    """The header and tensor infos, the range grown until they end: never the tensor data past
    the last read."""
    want = FIRST_RANGE_BYTES
    while True:
        buf, size = prefixes.read(name, want)
        try:
            return parse_gguf_header(prefixes.label(name), buf, size)
        except GgufHeaderCut as cut:
            want = max(cut.needed_bytes, GGUF_RANGE_GROWTH * len(buf))
            if want > MAX_GGUF_HEADER_BYTES:
                raise UserError(
                    f"{prefixes.label(name)}: the GGUF header runs past "
                    f"{MAX_GGUF_HEADER_BYTES // 2**20} MiB; the file is corrupt or not a model"
                ) from None


def _safetensors_header(prefixes: _Prefixes, name: str) -> SafetensorsHeader:
    label = prefixes.label(name)
    buf, size = prefixes.read(name, FIRST_RANGE_BYTES)
    n = safetensors_header_length(label, buf[:8], size)
    if len(buf) < 8 + n:
        buf, size = prefixes.read(name, 8 + n)
    return parse_safetensors_header(label, buf[8 : 8 + n], size)


def _download(rev: HubRevision, name: str) -> Path:
    """One file of the commit in the HF cache: downloaded (progress bar, resumed when cut) unless
    it is there already."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(rev.repo_id, name, revision=rev.sha))


# --------------------------------------------------------------------------------- the model
def _shard_names(rev: HubRevision) -> list[str]:
    names = list(rev.file_bytes)
    if INDEX_NAME in rev.file_bytes:
        index = _download(rev, INDEX_NAME)
        shards = index_shard_names(index.read_text(encoding="utf-8"), f"{rev.source}/{INDEX_NAME}")
        missing = [s for s in shards if s not in rev.file_bytes]
        if missing:
            raise UserError(
                f"{rev.source}/{INDEX_NAME} names {len(missing)} file(s) the repo lacks "
                f"({missing[0]} ...)"
            )
        return shards
    return default_shard_names([n for n in names if "/" not in n])


def _read_model(
    hub_id: HubId, rev: HubRevision, asked: str, prefixes: _Prefixes
) -> tuple[ModelFiles | None, ModelSpec, str]:
    """(the files' record, the spec, where its bytes are stored as the quant note names it)."""
    gguf: GgufModel | None = choose_gguf(rev.file_bytes, hub_id.quant, hub_id.repo_id)
    name = str(hub_id)
    if gguf is not None:
        headers = tuple(_gguf_header(prefixes, f) for f in gguf.files)
        files = gguf_model_files(headers, source=asked, name=name, files=gguf.files)
        return files, files.spec, f"{rev.source}/{gguf.label}"
    cfg = read_config_file(_download(rev, "config.json"))
    shards = _shard_names(rev)
    if not shards:  # only .bin or .pth weights, or none: the config's arithmetic, as for a config
        return None, spec_from_config(cfg, name=name), rev.source
    headers = tuple(_safetensors_header(prefixes, s) for s in shards)
    files = safetensors_model_files(cfg, headers, source=asked, name=name, files=tuple(shards))
    return files, files.spec, rev.source


def _fetch_note(rev: HubRevision, files: tuple[str, ...], fetched_bytes: int) -> str:
    if not files:
        return f"{rev.source}: config.json only (the repo has no safetensors or GGUF to count)"
    what = f"{len(files)} file header{'s' if len(files) > 1 else ''}"
    if not fetched_bytes:
        return f"{rev.source}: {what} read from the cache, nothing fetched"
    stored = sum(max(rev.file_bytes.get(f, 0), 0) for f in files)
    of = f" of the files' {bytes_text(stored)}" if stored else ""
    return (
        f"{rev.source}: {what} read by HTTP range reads ({bytes_text(fetched_bytes)}{of}), "
        "no weights downloaded"
    )


def hub_model(hub_id: HubId, revision: str | None = None, *, asked: str | None = None) -> HubModel:
    """The spec of a Hub model, its bytes per token from its files' headers (no weights
    downloaded). UserError, one line: unknown repo, gated without access, no network, no
    config.json or GGUF, a quant tag that picks nothing or several files, a lying header."""
    asked = asked or str(hub_id)
    with _hub_errors(asked, hub_id.repo_id, revision):
        rev = _list_revision(asked, hub_id.repo_id, revision)
        prefixes = _Prefixes(rev, asked)
        files, spec, stored_in = _read_model(hub_id, rev, asked, prefixes)
    weights = None
    if files is not None:
        weights = count_weights(files, files.spec)
        spec = spec_with_file_weights(files.spec, weights, stored_in)
    read = files.files if files is not None else ()
    note = _fetch_note(rev, read, prefixes.fetched_bytes)
    return HubModel(
        asked=asked,
        revision=rev,
        spec=dataclasses.replace(spec, notes=(*spec.notes, note)),
        weights=weights,
        files=read,
        fetched_bytes=prefixes.fetched_bytes,
    )


def download_model(hub_id: HubId, revision: str | None = None, *, asked: str | None = None) -> Path:
    """The files the embedded engine loads, in the HF cache: a GGUF file, or the folder of a
    safetensors repo's config, tokenizer and weights. Each downloaded once (a progress bar on a
    terminal; a cut transfer resumed), then reused; with HF_HUB_OFFLINE=1 only what is there."""
    asked = asked or str(hub_id)
    with _hub_errors(asked, hub_id.repo_id, revision):
        rev = _list_revision(asked, hub_id.repo_id, revision)
        gguf = choose_gguf(rev.file_bytes, hub_id.quant, hub_id.repo_id)
        if gguf is not None:
            if len(gguf.files) > 1:
                raise UserError(
                    f"{asked} is a GGUF split in {len(gguf.files)} files; the embedded engine "
                    "loads one file: pick a quant stored whole"
                )
            return _download(rev, gguf.files[0])
        folder = _download(rev, "config.json").parent
        wanted = [n for n in ENGINE_FILES if n in rev.file_bytes and n != "config.json"]
        for name in [*wanted, *_shard_names(rev)]:
            _download(rev, name)
        return folder


def engine_model_path(model: str | None, revision: str | None = None) -> str | None:
    """What `generate` and `serve` hand the engine: a path as given (None: the default model); a
    Hub id, its files downloaded into the HF cache. A local path wins over a Hub id of the same
    name unless a revision is given (as in `catalogue.load_spec`)."""
    hub_id = parse_hub_id(model) if model else None
    if hub_id is not None and (revision is not None or not Path(model).expanduser().exists()):
        return str(download_model(hub_id, revision, asked=model))
    if revision is not None:
        what = f"{model!r} is not one" if model else "give --model owner/name with it"
        raise UserError(f"--revision is for a Hub repo (owner/name); {what}")
    return model
