"""Suffix decoding (arXiv 2411.04975; ArcticInference's `suffix_decoding`, vLLM's `suffix`
method), written afresh: drafts whose size grows with how long the context's tail matched.

Structure: a suffix trie bounded by depth D = suffix_max_depth. Every n-gram (n <= D) of a stream
is a root path; its node counts the n-gram's occurrences (the root counts the tokens). A match and
the draft grown from it together never reach deeper than D, so nothing deeper is ever read; a
bounded trie then needs no suffix links or edge splitting (a compressed suffix tree does): a token
steps the D current tails (O(D)), and removing a stream walks its D-long windows and decrements
the same counts back, exactly. The price is up to D nodes per token of text.

Draft from a tail that matched m tokens (1 <= m <= D-1) at node v:

    size(m) = min(max_tokens, num_draft_tokens, floor(spec_max_factor * m + spec_offset))
    p(child) = p(parent) * count(child) / count(parent),  p(v) = 1;  nodes with p < spec_min_prob
               are dropped, depth stays <= D
    chain: follow the most frequent child; tree: the size(m) most probable nodes (best first, so
    siblings come best first and `DraftTree.best_path()` is the chain)
    score = sum of p over the draft (the expected number of accepted tokens)

The longest match goes first; a shorter one is tried only while its size could beat the best score
(a long match leaves only D - m levels to draft into). count(v) includes the tail's own occurrence,
which has no continuation yet: a pattern seen once before drafts at p = 1/2.

Scope "request" (default): one trie over the request's prompt + output. "shared": also one trie per
factory over the outputs of past and concurrent requests (the tokens after the first context a
proposer sees), at most suffix_cache_requests of them, oldest removed first (with their counts);
the better-scoring of the two drafts wins each step. The shared trie lives as long as the server and
is safe only from the scheduler thread.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from roofline.engine.runtime.speculate.base import SpecOptions
from roofline.engine.runtime.speculate.tree import DraftTree

STRIDE = 1 << 32  # edge key = parent * STRIDE + token; tokens are in [0, STRIDE)
ROOT = 0


class SuffixTrie:
    """Counts of all n-grams (n <= depth) of the inserted streams. Streams go in token by token
    through their tails (`extend`) and come out with `remove`. Nodes are ints indexing flat arrays;
    a removed node's index is reused."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._edges: dict[int, int] = {}  # parent * STRIDE + token -> child
        self.token = array("q", [-1])
        self.parent = array("q", [-1])
        self.count = array("q", [0])
        self._first = array("q", [-1])  # first child (the newest), next / previous sibling
        self._next = array("q", [-1])
        self._prev = array("q", [-1])
        self._free: list[int] = []

    def __len__(self) -> int:
        """Nodes besides the root."""
        return len(self.token) - 1 - len(self._free)

    def extend(self, tails: list[int], token: int) -> list[int]:
        """Count `token` after each tail (the nodes of the stream's suffixes of length 0..D-1);
        the new tails."""
        if not 0 <= token < STRIDE:
            raise ValueError(f"token ids must be in [0, 2**32); got {token}")
        self.count[ROOT] += 1
        edges, count = self._edges, self.count
        new_tails = [ROOT]
        for i, node in enumerate(tails):
            child = edges.get(node * STRIDE + token)
            if child is None:
                # the longer tails' n-grams end in this new one (tails grow by one token each):
                # new as well
                new_tails += self._new_nodes(tails[i:], token)
                break
            count[child] += 1
            new_tails.append(child)
        return new_tails[: self.depth]  # the depth-D n-gram is counted, not a tail

    def insert(self, tokens: Sequence[int]) -> list[int]:
        """Insert a whole stream; its final tails."""
        tails = [ROOT]
        for token in tokens:
            tails = self.extend(tails, int(token))
        return tails

    def remove(self, tokens: Sequence[int]) -> None:
        """Take a stream inserted with `extend` back out: decrement every n-gram it counted and
        drop the nodes left at zero (their descendants reach zero in the same walk)."""
        tokens = [int(t) for t in tokens]
        for start in range(len(tokens)):
            self.count[ROOT] -= 1
            node = ROOT
            for token in tokens[start : start + self.depth]:
                child = self._edges[node * STRIDE + token]
                self.count[child] -= 1
                if self.count[child] == 0:
                    self._unlink(child)
                node = child

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

    def continues(self, node: int) -> bool:
        """Whether `node` has a child (its n-gram was followed by something)."""
        return self._first[node] >= 0

    def _new_nodes(self, parents: list[int], token: int) -> list[int]:
        """A new child `token` under each of `parents` (distinct nodes), each its parent's newest
        child: freed indices first, then new ones, the columns grown at once."""
        free, count = self._free, self.count
        first, after, before, edges = self._first, self._next, self._prev, self._edges
        nodes = [free.pop() for _ in range(min(len(free), len(parents)))]
        for node, parent in zip(nodes, parents):
            self.token[node], self.parent[node], count[node] = token, parent, 1
            first[node] = before[node] = -1
        start, fresh = len(self.token), len(parents) - len(nodes)
        self.token.extend([token] * fresh)
        self.parent.extend(parents[len(nodes) :])
        count.extend([1] * fresh)
        for column in (first, after, before):
            column.extend([-1] * fresh)
        nodes += range(start, start + fresh)
        for node, parent in zip(nodes, parents):
            sibling = after[node] = first[parent]
            if sibling >= 0:
                before[sibling] = node
            first[parent] = node
            edges[parent * STRIDE + token] = node
        return nodes

    def _unlink(self, node: int) -> None:
        parent, before, after = self.parent[node], self._prev[node], self._next[node]
        if before >= 0:
            self._next[before] = after
        else:
            self._first[parent] = after
        if after >= 0:
            self._prev[after] = before
        del self._edges[parent * STRIDE + self.token[node]]
        self._free.append(node)


@dataclass(frozen=True)
class Draft:
    """A draft tree with each node's estimated probability and the match length it grew from."""

    tree: DraftTree
    probs: tuple[float, ...] = ()
    match_len: int = 0

    @property
    def score(self) -> float:
        """Expected accepted tokens: the sum of the nodes' probabilities."""
        return sum(self.probs)


NO_DRAFT = Draft(DraftTree.empty())


def draft_size(match_len: int, cap: int, factor: float, offset: float) -> int:
    """min(cap, floor(factor * match_len + offset)), at least 0 (the 1e-9 absorbs float error in
    products such as 0.29 * 100)."""
    return max(0, min(cap, math.floor(factor * match_len + offset + 1e-9)))


def expand(trie: SuffixTrie, node: int, levels: int, size: int, min_prob: float, tree: bool):
    """Up to `size` draft nodes below trie `node`, at most `levels` deep, p >= min_prob:
    (tokens, parents, probs). Chain: the most frequent child at each level (ties to the newest).
    Tree: best-first by p, so parents precede children and siblings come best first."""
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    count = trie.count
    if not tree:
        p = 1.0
        while len(tokens) < min(size, levels):
            kids = trie.children(node)
            if not kids:
                break
            best = max(kids, key=count.__getitem__)
            p *= count[best] / count[node]
            if p < min_prob:
                break
            tokens.append(trie.token[best])
            parents.append(len(tokens) - 2)
            probs.append(p)
            node = best
        return tokens, parents, probs
    # best first: (-p, order, trie node, draft parent, level); children are read straight off the
    # sibling lists (newest first, as `children`): this loop runs for every match length tried
    first, after, token_of = trie._first, trie._next, trie.token
    heap: list[tuple[float, int, int, int, int]] = []
    order, at, p, here, level = 0, node, 1.0, -1, 0
    while True:
        if level < levels:
            kid, total = first[at], count[at]
            while kid >= 0:
                q = p * count[kid] / total
                if q >= min_prob:
                    heapq.heappush(heap, (-q, order, kid, here, level + 1))
                    order += 1
                kid = after[kid]
        if not heap or len(tokens) >= size:
            return tokens, parents, probs
        neg_p, _, at, parent, level = heapq.heappop(heap)
        tokens.append(token_of[at])
        parents.append(parent)
        probs.append(-neg_p)
        p, here = -neg_p, len(tokens) - 1


def best_draft(
    trie: SuffixTrie,
    node_of: Callable[[int], int | None],
    longest: int,
    cap: int,
    options: SpecOptions,
    holds_context: bool = False,
) -> Draft:
    """The best-scoring draft over match lengths longest, longest-1, ...: `node_of(m)` is the trie
    node of the context's last m tokens. Ties go to the longer match; stops once size(m) cannot
    beat the best score.

    holds_context: the trie holds the context itself (the request's own trie), so count(v) counts
    the context's own occurrence, which has no continuation yet: each level's p then sum to at
    most (count(v) - 1) / count(v), a draft's score to min(size, levels) times that, and a match
    whose bound cannot beat the best score is not expanded."""
    best_score, best = 0.0, None
    for m in range(longest, 0, -1):
        size = draft_size(m, cap, options.spec_max_factor, options.spec_offset)
        if size <= best_score:
            break  # size(m) only shrinks with m
        levels = trie.depth - m
        if min(size, levels) <= best_score:
            continue
        node = node_of(m)
        if node is None:
            continue
        seen = trie.count[node]
        # the bound, with room for the float rounding of the p's products: never skips a winner
        if holds_context and min(size, levels) * (seen - 1) / seen < best_score - 1e-9:
            continue
        tokens, parents, probs = expand(
            trie, node, levels, size, options.spec_min_prob, options.tree
        )
        score = sum(probs)
        if score > best_score:
            best_score, best = score, (tokens, parents, probs, m)
    if best is None:
        return NO_DRAFT
    tokens, parents, probs, m = best
    return Draft(DraftTree(tokens, parents), tuple(probs), m)


def longest_match(trie: SuffixTrie, context: Sequence[int]) -> int:
    """The largest m <= min(len(context), depth - 1) whose last-m-token n-gram is in `trie` with a
    continuation (0 if none). Monotone in m (a suffix of an n-gram followed by t is too): binary
    search."""
    low, high = 0, min(len(context), trie.depth - 1)
    while low < high:
        mid = (low + high + 1) // 2
        node = trie.find(context[len(context) - mid :])
        if node is not None and trie.continues(node):
            low = mid
        else:
            high = mid - 1
    return low


class SharedSuffixes:
    """The factory's trie over requests' outputs: at most `limit` streams, the oldest removed
    first (FIFO) with its counts. A stream is extended while it is kept."""

    def __init__(self, depth: int, limit: int) -> None:
        self.trie = SuffixTrie(depth)
        self.limit = limit
        self._streams: dict[int, tuple[list[int], list[int]]] = {}  # id -> (tokens, tails)
        self._opened = 0

    def __len__(self) -> int:
        return len(self._streams)

    def open(self) -> int:
        """A new stream's id; removes the oldest streams beyond the limit."""
        self._opened += 1
        self._streams[self._opened] = ([], [ROOT])
        while len(self._streams) > self.limit:
            self.evict(next(iter(self._streams)))
        return self._opened

    def append(self, stream: int, tokens: Sequence[int]) -> None:
        """Add tokens to a stream (nothing once it is evicted)."""
        kept = self._streams.get(stream)
        if kept is None:
            return
        seen, tails = kept
        for token in tokens:
            tails = self.trie.extend(tails, int(token))
            seen.append(int(token))
        self._streams[stream] = (seen, tails)

    def evict(self, stream: int) -> None:
        seen, _ = self._streams.pop(stream)
        self.trie.remove(seen)


class SuffixProposer:
    """Suffix decoding for one request: its own trie over prompt + output and, in shared scope,
    the factory's trie over outputs; each step the better-scoring draft."""

    def __init__(self, options: SpecOptions, shared: SharedSuffixes | None = None) -> None:
        self.options = options
        self.shared = shared
        self.local = SuffixTrie(options.suffix_max_depth)
        self._tails = [ROOT]  # local nodes of the context's suffixes of length 0..D-1
        self._len = 0  # context tokens inserted
        self._last = -1  # the last of them
        self._prompt_len = -1  # the first context seen: later tokens are output
        self._stream = 0  # its stream in the shared trie (0: none yet)
        self.match_len: int | None = None  # the match behind the last proposal

    @classmethod
    def factory(cls, options: SpecOptions, target: object = None) -> Callable[[], SuffixProposer]:
        """The registry entry: a maker of one proposer per request (`target`, the runner, is
        unused)."""
        if options.suffix_scope == "shared":
            shared = SharedSuffixes(options.suffix_max_depth, options.suffix_cache_requests)

            def make() -> SuffixProposer:
                return cls(options, shared)

            make.cross_request = True  # one request's outputs draft for later ones (bench repeats)
            return make
        return lambda: cls(options)

    def propose(self, context: Sequence[int], max_tokens: int) -> DraftTree:
        found = self.draft(context, max_tokens)
        self.match_len = found.match_len or None  # the acceptance statistics' bucket (adaptive)
        return found.tree

    def draft(self, context: Sequence[int], max_tokens: int) -> Draft:
        """The better of the local and the shared trie's best drafts (ties: local)."""
        self._sync(context)
        cap = min(max_tokens, self.options.num_draft_tokens)
        if cap <= 0:
            return NO_DRAFT
        tails = self._tails
        local = self.local
        longest = next((m for m in range(len(tails) - 1, 0, -1) if local.continues(tails[m])), 0)
        best = best_draft(local, tails.__getitem__, longest, cap, self.options, holds_context=True)
        if self.shared is not None:
            trie, n = self.shared.trie, len(context)
            found = best_draft(
                trie,
                lambda m: trie.find(context[n - m :]),
                longest_match(trie, context),
                cap,
                self.options,
            )
            if found.score > best.score:
                best = found
        return best

    def accepted(self, context: Sequence[int]) -> None:
        """Insert the tokens of `context` not inserted yet."""
        self._sync(context)

    def _sync(self, context: Sequence[int]) -> None:
        n = len(context)
        if n < self._len or (self._len and int(context[self._len - 1]) != self._last):
            # not an extension of what we saw: start over (the shared stream ends)
            self.local = SuffixTrie(self.options.suffix_max_depth)
            self._tails, self._len, self._prompt_len, self._stream = [ROOT], 0, -1, 0
        if self._prompt_len < 0:
            self._prompt_len = n
        for i in range(self._len, n):
            self._tails = self.local.extend(self._tails, int(context[i]))
        if self.shared is not None and n > max(self._len, self._prompt_len):
            if not self._stream:
                self._stream = self.shared.open()
            self.shared.append(self._stream, context[max(self._len, self._prompt_len) : n])
        self._len = n
        if n:
            self._last = int(context[n - 1])
