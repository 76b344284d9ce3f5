"""A fake Hugging Face Hub on loopback, for tests/modelspec/test_hub.py: the routes huggingface_hub
calls, and a count of every byte it sends.

    GET  /api/models/{repo}[/revision/{rev}]    the model info: sha, files and their sizes, gated
    HEAD /{repo}/resolve/{rev}/{file}           ETag, X-Repo-Commit, Content-Length
    GET  /{repo}/resolve/{rev}/{file}           the file; `Range: bytes=a-b` -> 206 + Content-Range

Errors carry the headers the real Hub sends, which huggingface_hub turns into its exceptions:
X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound (404), GatedRepo (401 without the
token). A file in `cut_once` has its next GET cut after that many bytes (the full Content-Length
promised, the connection closed), as a dropped transfer. `use_fake_hub` points huggingface_hub at
the server and a temporary HF_HOME: huggingface_hub reads its settings into constants when it is
imported, so the constants are patched as well as the environment.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

TOKEN = "hf_fake_token_for_tests"
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
_API = re.compile(r"/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?")
_RESOLVE = re.compile(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)")


@dataclass
class Repo:
    files: dict[str, bytes]
    sha: str
    gated: bool = False
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> sha


@dataclass(frozen=True)
class Sent:
    """One answer: what was asked and how many body bytes went out."""

    method: str
    path: str
    range: str | None
    status: int
    body_bytes: int


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.cut_once: dict[tuple[str, str], int] = {}  # (repo, file): its next GET's bytes
        self.log: list[Sent] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, repo_id: str, files: dict[str, bytes], *, gated: bool = False) -> str:
        """A repo at one commit (main); its sha, from the contents."""
        digest = hashlib.sha1(repo_id.encode())
        for name in sorted(files):
            digest.update(name.encode() + hashlib.sha256(files[name]).digest())
        sha = digest.hexdigest()
        self.repos[repo_id] = Repo(dict(files), sha, gated, {"main": sha})
        return sha

    def sent_bytes(self) -> int:
        with self._lock:
            return sum(s.body_bytes for s in self.log)

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    def record(self, sent: Sent) -> None:
        with self._lock:
            self.log.append(sent)

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real Hub: every answer has a length

        def log_message(self, *args) -> None:  # quiet: the log is `hub.log`
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _send(self, status: int, body: bytes, head: bool, **headers: str) -> None:
            sent = 0 if head else len(body)
            # counted before it goes out: the client may be on its next call while this thread
            # still writes
            hub.record(Sent(self.command, self.path, self.headers.get("Range"), status, sent))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k.replace("_", "-"), v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _error(self, status: int, code: str, head: bool, **headers: str) -> None:
            body = json.dumps({"error": code}).encode()
            self._send(status, body, head, X_Error_Code=code, X_Error_Message=code, **headers)

        def _repo(self, repo_id: str, rev: str, head: bool) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", head)
                return None
            if rev not in repo.refs and rev != repo.sha:
                self._error(404, "RevisionNotFound", head)
                return None
            return repo

        def _answer(self, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            if m := _API.fullmatch(path):
                repo = self._repo(m.group(1), m.group(2) or "main", head)
                if repo is not None:
                    info = {
                        "id": m.group(1),
                        "modelId": m.group(1),
                        "sha": repo.sha,
                        "private": False,
                        "gated": "manual" if repo.gated else False,
                        "siblings": [
                            {"rfilename": n, "size": len(b)} for n, b in sorted(repo.files.items())
                        ],
                    }
                    self._send(
                        200, json.dumps(info).encode(), head, Content_Type="application/json"
                    )
                return
            if m := _RESOLVE.fullmatch(path):
                self._file(m.group(1), m.group(2), m.group(3), head)
                return
            self._error(404, "NotFound", head)

        def _file(self, repo_id: str, rev: str, name: str, head: bool) -> None:
            repo = self._repo(repo_id, rev, head)
            if repo is None:
                return
            if repo.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._error(401, "GatedRepo", head)
                return
            data = repo.files.get(name)
            if data is None:
                self._error(404, "EntryNotFound", head, X_Repo_Commit=repo.sha)
                return
            etag = hashlib.sha256(data).hexdigest()
            common = {"ETag": f'"{etag}"', "X_Repo_Commit": repo.sha, "Accept_Ranges": "bytes"}
            if head:  # the length of the file, no body
                self._send(200, data, head, **common)
                return
            if (repo_id, name) in hub.cut_once:
                self._cut(data, hub.cut_once.pop((repo_id, name)), common)
                return
            ranged = _RANGE.fullmatch(self.headers.get("Range", "").strip())
            if ranged is None:
                self._send(200, data, head, **common)
                return
            start = int(ranged.group(1))
            end = min(int(ranged.group(2)) if ranged.group(2) else len(data) - 1, len(data) - 1)
            if start >= len(data):
                self._error(416, "RangeNotSatisfiable", head)
                return
            rng = f"bytes {start}-{end}/{len(data)}"
            self._send(206, data[start : end + 1], head, Content_Range=rng, **common)

        def _cut(self, data: bytes, sent: int, common: dict[str, str]) -> None:
            """The whole length promised, `sent` bytes sent, the connection closed."""
            hub.record(Sent(self.command, self.path, self.headers.get("Range"), 200, sent))
            self.send_response(200)
            for k, v in common.items():
                self.send_header(k.replace("_", "-"), v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:sent])
            self.wfile.flush()
            self.close_connection = True

    return Handler


def use_fake_hub(monkeypatch, url: str, home: Path, *, offline: bool = False) -> None:
    """huggingface_hub pointed at `url` with `home` as HF_HOME and no token: its environment for a
    child process, and its constants (read at import) for this one."""
    from huggingface_hub import constants

    env = {
        "HF_ENDPOINT": url,
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HF_ASSETS_CACHE"):
        monkeypatch.delenv(k, raising=False)
    patched = {
        "ENDPOINT": url,
        "HUGGINGFACE_CO_URL_TEMPLATE": url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "HF_HUB_OFFLINE": offline,
    }
    for k, v in patched.items():
        monkeypatch.setattr(constants, k, v)
