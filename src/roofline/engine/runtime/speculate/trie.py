"""Suffix-trie n-gram proposer (SGLang's `ngram` method, written afresh): a draft tree from a trie.

Trie: every n-gram (n <= D = max_trie_depth) of the text is a root path with a count and a tick
(last use). Token t adds child t under each tail s_0 = root, ..., s_{D-1} (the text's suffixes);
those are the new tails, so a token costs O(D). Eviction takes the least recently used leaf not
touched this step; a step touches at most D(D+1)/2 nodes, the smallest capacity allowed, so one
always exists.

Draft: the tails s_1..s_{D-1} are anchors, longest first (a long match is confident). BFS from each
with breadth `bfs_breadth(m)`, p(child) = p(parent) * count[child] / count[parent]; a level keeps
its b most probable offers, grouped by parent, best child first, so `DraftTree.best_path()` is the
chain guess. Anchors merge into one tree; chain mode uses breadth 1.

Scope "request" (default): a trie per request, no locks, freed with it. "shared" (SGLang's way):
one trie per factory; outputs stay exact (verification), but it lives as long as the server and is
safe only from the scheduler thread.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Sequence

from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.tree import DraftTree


def bfs_breadth(
    match_len: int, max_trie_depth: int, min_bfs_breadth: int, max_bfs_breadth: int
) -> int:
    """Tokens kept per BFS level for an anchor that matched `match_len` tokens.

    Linear in the match length m over [1, D-1] (D = max_trie_depth), rounded half up, m clamped:

        breadth(m) = max_bfs_breadth - (max_bfs_breadth - min_bfs_breadth) * (m - 1) / (D - 2)

    so a one-token match (little evidence) is widest; D = 2 gives max_bfs_breadth. Defaults (D 18,
    1..10): m = 1 -> 10, 9 -> 5, 17 -> 1. SGLang (trie_cache.cpp) instead narrows per expanded node
    and by one step at every deeper level."""
    if max_trie_depth <= 2:
        return max_bfs_breadth
    m = min(max(match_len, 1), max_trie_depth - 1)
    span = max_bfs_breadth - min_bfs_breadth
    steps = max_trie_depth - 2
    return max_bfs_breadth - (2 * span * (m - 1) + steps) // (2 * steps)


STRIDE = 1 << 32  # edge key = parent * STRIDE + token; tokens are in [0, STRIDE)
ROOT = 0


class TokenTrie:
    """Counts of all n-grams (n <= max_depth) of the inserted token streams, in a pool of `capacity`
    nodes (besides the root) with least-recently-used leaf eviction. Streams are inserted token by
    token through their tails (`extend`). Nodes are ints indexing flat arrays; an evicted node's
    index is reused, so holders of node ids keep the node's serial to tell (`alive`)."""

    def __init__(self, capacity: int, max_depth: int) -> None:
        self.capacity = capacity
        self.max_depth = max_depth
        self.size = 0
        self.clock = 0
        self._edges: dict[int, int] = {}  # parent * STRIDE + token -> child
        self.token = array("q", [-1])
        self.parent = array("q", [-1])
        self.count = array("q", [0])
        self.tick = array("q", [0])
        self.serial = array("q", [0])  # creation number; -1 once evicted
        self._first = array("q", [-1])  # first child (the newest), next/previous sibling
        self._next = array("q", [-1])
        self._prev = array("q", [-1])
        self._in_heap = bytearray(1)
        self._free: list[int] = []  # evicted indices, reused first
        self._used = 1  # indices below this have been handed out (0 is the root)
        self._leaves: list[int] = []  # heap of tick * STRIDE + node, lazily re-keyed
        self._serials = 0

    def extend(self, tails: list[int], token: int) -> list[int]:
        """Insert `token` after a stream whose suffix nodes of length 0.. are `tails`; the new
        tails."""
        if not 0 <= token < STRIDE:
            raise ValueError(f"token ids must be in [0, 2**32); got {token}")
        self.clock += 1
        for node in tails:  # pin: nothing touched in this step is evicted in it
            self.tick[node] = self.clock
        new_tails = [ROOT]
        for node in tails[: self.max_depth - 1]:
            new_tails.append(self._step(node, token, count=True))
        if len(tails) == self.max_depth:  # the n-gram of length max_depth: counted, not a tail
            self._step(tails[-1], token, count=True)
        return new_tails

    def tails_of(self, tokens: Sequence[int]) -> list[int]:
        """The nodes of the suffixes of length 0..max_depth-1 of `tokens`, re-creating (count 1) any
        missing ones; existing counts are left alone."""
        self.clock += 1
        window = [int(t) for t in tokens[max(0, len(tokens) - self.max_depth + 1) :]]
        tails = [ROOT]
        for m in range(1, len(window) + 1):
            node = ROOT
            for token in window[len(window) - m :]:
                node = self._step(node, token, count=False)
            tails.append(node)
        return tails

    def insert(self, tokens: Sequence[int]) -> list[int]:
        """Insert a whole stream; its final tails."""
        tails = [ROOT]
        for token in tokens:
            tails = self.extend(tails, int(token))
        return tails

    def alive(self, node: int, serial: int) -> bool:
        return self.serial[node] == serial

    def find(self, ngram: Sequence[int]) -> int | None:
        """The node of `ngram`, or None if it is not in the trie."""
        node: int | None = ROOT
        for token in ngram:
            node = self._edges.get(node * STRIDE + int(token))
            if node is None:
                return None
        return node

    def children(self, node: int) -> list[int]:
        """The children of `node`, newest first."""
        out = []
        child = self._first[node]
        while child >= 0:
            out.append(child)
            child = self._next[child]
        return out

    def ranked_children(self, node: int, limit: int) -> list[int]:
        """The `limit` best children of `node`: highest count first, ties to the most recent."""
        count, tick = self.count, self.tick
        return heapq.nsmallest(limit, self.children(node), key=lambda c: (-count[c], -tick[c]))

    def _step(self, node: int, token: int, *, count: bool) -> int:
        child = self._edges.get(node * STRIDE + token)
        if child is None:
            return self._new_node(node, token)
        if count:
            self.count[child] += 1
        self.tick[child] = self.clock
        return child

    def _new_node(self, parent: int, token: int) -> int:
        if self.size >= self.capacity:
            self._evict_one()
        node = self._free.pop() if self._free else self._fresh_index()
        self._serials += 1
        self.token[node] = token
        self.parent[node] = parent
        self.count[node] = 1
        self.tick[node] = self.clock
        self.serial[node] = self._serials
        self._first[node] = -1
        self._prev[node] = -1
        sibling = self._next[node] = self._first[parent]
        if sibling >= 0:
            self._prev[sibling] = node
        self._first[parent] = node
        self._edges[parent * STRIDE + token] = node
        self.size += 1
        self._push_leaf(node)
        return node

    def _fresh_index(self) -> int:
        """The next never-used index, growing the columns (geometrically, up to capacity + 1) if
        needed."""
        node = self._used
        if node == len(self.token):
            grow = min(max(node, 1024), self.capacity + 1 - node)
            for column in (
                self.token,
                self.parent,
                self.count,
                self.tick,
                self.serial,
                self._first,
                self._next,
                self._prev,
            ):
                column.frombytes(bytes(column.itemsize * grow))
            self._in_heap.extend(bytes(grow))
        self._used += 1
        return node

    def _push_leaf(self, node: int) -> None:
        heapq.heappush(self._leaves, self.tick[node] * STRIDE + node)
        self._in_heap[node] = 1

    def _evict_one(self) -> None:
        """Remove the least recently used leaf not touched in the current step. Every node has at
        most one heap entry and an evicted node none, so an index can be reused at once."""
        leaves = self._leaves
        while leaves:
            tick, node = divmod(leaves[0], STRIDE)
            if self._first[node] >= 0:  # no longer a leaf: dropped, pushed again when it is one
                heapq.heappop(leaves)
                self._in_heap[node] = 0
            elif tick < self.tick[node]:  # touched since it was pushed
                heapq.heapreplace(leaves, self.tick[node] * STRIDE + node)
            elif tick >= self.clock:
                break
            else:
                heapq.heappop(leaves)
                self._remove(node)
                return
        raise RuntimeError(
            f"trie pool of {self.capacity} nodes has no leaf to evict (capacity too small)"
        )

    def _remove(self, node: int) -> None:
        parent, before, after = self.parent[node], self._prev[node], self._next[node]
        if before >= 0:
            self._next[before] = after
        else:
            self._first[parent] = after
        if after >= 0:
            self._prev[after] = before
        del self._edges[parent * STRIDE + self.token[node]]
        self.serial[node] = -1
        self._in_heap[node] = 0
        self._free.append(node)
        self.size -= 1
        if parent != ROOT and self._first[parent] < 0 and not self._in_heap[parent]:
            self._push_leaf(parent)


def grow_draft_tree(
    trie: TokenTrie,
    anchors: Sequence[tuple[int, int]],
    max_nodes: int,
    breadth: Callable[[int], int],
) -> DraftTree:
    """BFS from each (match length, anchor node) in turn into one draft tree of at most max_nodes
    nodes; `breadth(match_len)` tokens are kept per level (module docstring)."""
    tokens: list[int] = []
    parents: list[int] = []
    index: dict[tuple[int, int], int] = {}  # (draft parent, token) -> draft node
    for match_len, anchor in anchors:
        if len(tokens) >= max_nodes:
            break
        width = breadth(match_len)
        frontier: list[tuple[int, int, float]] = [(-1, anchor, 1.0)]  # (draft node, trie node, p)
        while frontier and len(tokens) < max_nodes:
            offers = []  # (-p, frontier order, rank, draft parent, trie child)
            for order, (draft_parent, node, p) in enumerate(frontier):
                total = trie.count[node]
                for rank, child in enumerate(trie.ranked_children(node, width)):
                    share = trie.count[child] / max(total, trie.count[child])
                    offers.append((-p * share, order, rank, draft_parent, child))
            kept = sorted(offers, key=lambda o: o[:3])[:width]
            kept.sort(key=lambda o: o[1:3])
            frontier = []
            for neg_p, _, _, draft_parent, child in kept:
                key = (draft_parent, trie.token[child])
                node_index = index.get(key)
                if node_index is None:
                    if len(tokens) >= max_nodes:
                        break
                    node_index = index[key] = len(tokens)
                    tokens.append(trie.token[child])
                    parents.append(draft_parent)
                frontier.append((node_index, child, -neg_p))
    return DraftTree(tuple(tokens), tuple(parents))


class TrieProposer:
    """SGLang-style n-gram proposer for one request: a draft tree (or its best path) from a suffix
    trie, its own or one shared by all proposers of a factory."""

    def __init__(self, options: SpecOptions, trie: TokenTrie | None = None) -> None:
        self.options = options
        self.trie = (
            trie if trie is not None else TokenTrie(options.trie_capacity, options.max_trie_depth)
        )
        self._tails = [ROOT]  # nodes of the context's suffixes of length 0..max_trie_depth-1
        self._serials = [0]
        self._len = 0  # context tokens inserted
        self._last = -1  # the last of them
        self.match_len: int | None = None  # the longest anchor of the last proposal

    @classmethod
    def factory(cls, options: SpecOptions, target: object = None) -> Callable[[], TrieProposer]:
        """The registry entry: a maker of one proposer per request (`target`, the runner, is
        unused)."""
        if options.trie_scope == "shared":
            shared = TokenTrie(options.trie_capacity, options.max_trie_depth)

            def make() -> TrieProposer:
                return cls(options, shared)

            make.cross_request = True  # what one request inserts drafts for later ones
            return make
        return lambda: cls(options)

    def propose(self, context: Sequence[int], max_tokens: int) -> DraftTree:
        self._sync(context)
        opts = self.options
        max_nodes = min(max_tokens, opts.num_draft_tokens)
        if max_nodes <= 0:
            return DraftTree.empty()
        tails = self._tails
        anchors = [
            (m, tails[m]) for m in range(len(tails) - 1, 0, -1) if self.trie.children(tails[m])
        ]
        self.match_len = anchors[0][0] if anchors else None  # the statistics' bucket (adaptive)
        if not opts.tree:
            return grow_draft_tree(self.trie, anchors, max_nodes, lambda m: 1).best_path()
        return grow_draft_tree(
            self.trie,
            anchors,
            max_nodes,
            lambda m: bfs_breadth(
                m, opts.max_trie_depth, opts.min_bfs_breadth, opts.max_bfs_breadth
            ),
        )

    def accepted(self, context: Sequence[int]) -> None:
        """Insert the tokens of `context` not inserted yet."""
        self._sync(context)

    def _sync(self, context: Sequence[int]) -> None:
        trie = self.trie
        n = len(context)
        if n < self._len or (self._len and int(context[self._len - 1]) != self._last):
            self._tails, self._len = [ROOT], 0  # not an extension of what we saw: start over
        elif not all(map(trie.alive, self._tails, self._serials)):  # evicted by another request
            self._tails = trie.tails_of(context[: self._len])
        for i in range(self._len, n):
            self._tails = trie.extend(self._tails, int(context[i]))
        self._serials = [trie.serial[node] for node in self._tails]
        self._len = n
        if n:
            self._last = int(context[n - 1])
