"""An exact prefix cache: the K/V of prompt granules seen before, reused by later prompts.

A node holds the K/V of positions [kG, (k+1)G) computed for the exact token prefix [0, (k+1)G),
G = the prefill granule (`ModelRunner.prefill_chunk_tokens`). Prefill runs each granule as its own
computation at these fixed positions (prefill_chunks.py), and a granule's K/V depend only on the
tokens up to its end, so K/V copied from a node are the bits a cold prefill writes: a prompt that
matches m whole granules loads them and prefills from mG, giving a cold server's logits.

Why a trie of granules (each node's children keyed by the next G token ids), not a hash chain: the
keys are the tokens themselves, so a match is exact by construction (no hash can alias two
prefixes), and the tree says what may be evicted: only a leaf, since an inner node serves every
longer prefix below it.

A prompt's last chunk may be a node too, with the logits of its last token (a tail: shorter than
a granule, or a whole one): the same prompt sent again loads every node and samples from those
logits, computing nothing. A tail is never a parent: a longer prompt computes that granule whole.

Part of a node (`partial_child`): a row's K/V depend only on the tokens up to its position, and
the runner's prefill gives them the bits of decoding one token at a time wherever it starts
(prefill_chunks.py), so a prompt whose next granule starts like a cached node loads the shared
first rows and computes the rest.

Reference counts: a request holds the nodes of its path while it prefills (it extends that path);
LRU eviction takes unreferenced leaves until a new node fits the byte budget; when nothing can go,
the new node is not stored. Owned by the scheduler thread; `stats()` is a snapshot.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import numpy as np

__all__ = ["DEFAULT_PREFIX_CACHE_MB", "PrefixCache", "PrefixCacheStats", "PrefixNode"]

# Budget of `roofline serve` (MiB): ~11k tokens of the default model's K/V (45 KiB a token), a few
# long system prompts; small next to the RAM of any machine that runs the engine.
DEFAULT_PREFIX_CACHE_MB = 512


@dataclass(eq=False)
class PrefixNode:
    """One granule: its tokens, its K/V (arrays, as the runner's `save_kv` returns them)."""

    tokens: tuple[int, ...]
    parent: PrefixNode | None
    kv: tuple[np.ndarray, ...] = ()
    nbytes: int = 0
    # float32 logits of the last position, when a prompt ended here (a tail)
    logits: np.ndarray | None = None
    refs: int = 0
    used: int = 0  # LRU tick of the last match or insert
    children: dict[tuple[int, ...], PrefixNode] = field(default_factory=dict)


@dataclass(frozen=True)
class PrefixCacheStats:
    """Counters since start and the cache's size now."""

    lookups: int = 0  # requests looked up
    hits: int = 0  # requests that reused at least one granule
    tokens_reused: int = 0
    evictions: int = 0  # nodes evicted
    entries: int = 0
    bytes: int = 0
    budget_bytes: int = 0


class PrefixCache:
    """Granules of K/V by exact token prefix, within `budget_bytes`."""

    def __init__(self, granule: int, budget_bytes: int):
        if granule < 1 or budget_bytes < 1:
            raise ValueError(f"need a granule and a budget, got {granule}, {budget_bytes} bytes")
        self.granule = int(granule)
        self.budget_bytes = int(budget_bytes)
        self._root = PrefixNode((), None)
        self._tick = itertools.count(1)
        self._bytes = 0
        self._entries = 0
        self._lookups = self._hits = self._reused = self._evictions = 0

    def _key(self, ids: Seq[int], k: int) -> tuple[int, ...]:
        g = self.granule
        return tuple(int(t) for t in ids[k * g : (k + 1) * g])

    def child(self, path: Seq[PrefixNode], ids: Seq[int]) -> PrefixNode | None:
        """The node of granule len(path) of `ids` below `path` (the nodes of granules 0..), if
        cached."""
        parent = path[-1] if path else self._root
        return parent.children.get(self._key(ids, len(path)))

    def partial_child(
        self, path: Seq[PrefixNode], ids: Seq[int], length: int
    ) -> tuple[PrefixNode, int] | None:
        """The node below `path` whose tokens share the longest common prefix with the next
        `length` of `ids` (granule len(path)), and that prefix's length; None when no node shares a
        first token. Its LRU tick is renewed."""
        parent = path[-1] if path else self._root
        start = len(path) * self.granule
        want = [int(t) for t in ids[start : start + length]]
        best, best_n = None, 0
        for key, node in parent.children.items():
            if key[0] != want[0]:
                continue
            n = next(
                (i for i, (a, b) in enumerate(zip(key, want)) if a != b), min(len(key), len(want))
            )
            if n > best_n:
                best, best_n = node, n
        if best is None:
            return None
        best.used = next(self._tick)
        return best, best_n

    def match(self, ids: Seq[int], max_granules: int) -> list[PrefixNode]:
        """The longest cached path of whole granules of `ids`, at most max_granules; each node gains
        a reference (give them back with `release`). Counts one lookup."""
        path: list[PrefixNode] = []
        while len(path) < max_granules:
            node = self.child(path, ids)
            if node is None:
                break
            self.acquire(node)
            path.append(node)
        self.count_lookup()
        self.count_reuse(sum(len(n.tokens) for n in path), first=True)
        return path

    def count_lookup(self) -> None:
        self._lookups += 1

    def count_reuse(self, tokens: int, *, first: bool) -> None:
        """Count prompt tokens one request reused; `first`: its first reuse (a hit)."""
        if tokens and first:
            self._hits += 1
        self._reused += tokens

    def acquire(self, node: PrefixNode) -> None:
        node.refs += 1
        node.used = next(self._tick)

    def release(self, nodes: Seq[PrefixNode]) -> None:
        """Give back one reference on each node."""
        for node in nodes:
            if node.refs < 1:
                raise ValueError("a prefix-cache node released more often than acquired")
            node.refs -= 1

    def insert(
        self,
        path: Seq[PrefixNode],
        ids: Seq[int],
        kv: Callable[[], tuple[np.ndarray, ...]],
        logits: np.ndarray | None = None,
    ) -> PrefixNode | None:
        """Granule len(path) of `ids` below `path`, holding `kv()` (called only when the node is
        new); with `logits` (`ids` ends in this node: a tail, which may be short) they are kept too.
        The node gains a reference. None when it does not fit the budget even after every
        unreferenced leaf is evicted."""
        parent = path[-1] if path else self._root
        key = self._key(ids, len(path))
        if len(key) != self.granule and (logits is None or not key):
            raise ValueError(f"a node holds {self.granule} tokens, got {len(key)}")
        node = parent.children.get(key)
        if node is None:
            arrays = tuple(kv())
            nbytes = sum(a.nbytes for a in arrays)
            if not self._make_room(nbytes):
                return None
            node = PrefixNode(key, None if parent is self._root else parent, arrays, nbytes)
            parent.children[key] = node
            self._bytes += nbytes
            self._entries += 1
        self.acquire(node)
        if logits is not None and node.logits is None and self._make_room(logits.nbytes):
            node.logits = logits
            node.nbytes += logits.nbytes
            self._bytes += logits.nbytes
        return node

    def _make_room(self, nbytes: int) -> bool:
        """Evict unreferenced leaves, least recently used first, until nbytes more fit (none when
        nbytes exceeds the whole budget)."""
        if nbytes > self.budget_bytes:
            return False
        while self._bytes + nbytes > self.budget_bytes:
            leaves = [n for n in self._nodes() if n.refs == 0 and not n.children]
            if not leaves:
                return False
            victim = min(leaves, key=lambda n: n.used)
            parent = victim.parent or self._root
            del parent.children[victim.tokens]
            self._bytes -= victim.nbytes
            self._entries -= 1
            self._evictions += 1
        return True

    def _nodes(self):
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def referenced(self) -> int:
        """References held now, summed over nodes (0 when no request holds any)."""
        return sum(n.refs for n in self._nodes())

    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(
            self._lookups,
            self._hits,
            self._reused,
            self._evictions,
            self._entries,
            self._bytes,
            self.budget_bytes,
        )
