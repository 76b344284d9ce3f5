"""Draft trees: the tokens a proposer guesses will follow the root, and the mask that verifies them.

The root is the last token already chosen, not part of the tree. Node i holds tokens[i] under
parents[i]: -1 for the root, else an earlier node (parents[i] < i), so nodes are in topological
order and any prefix is again a tree. A chain has parents == (-1, 0, 1, ..., n-2). Siblings carry
distinct tokens; the first child is the proposer's best guess, so first children from the root
(`best_path`) are its chain.

Verification runs the root (row 0) and node i (row i+1) through the target in one pass; row a may
attend to row b iff b is a or an ancestor of a (the root is everyone's):

    mask[a, b] = (b == a) or (b is an ancestor of a);  mask[i+1] = mask[parents[i]+1] + column i+1

A chain's mask is the causal lower triangle. With the rows at cache positions start..start+n,
`ancestor_positions` lists the positions each row may read beyond the committed context: its
ancestors and itself, root first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def _check_parents(parents: Sequence[int]) -> None:
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(
                f"parents[{i}] = {parent}: must be -1 (the root) or an earlier node in [0, {i})"
            )


@dataclass(frozen=True)
class DraftTree:
    """Draft tokens that would follow the root (the last token already chosen, not part of the
    tree).

    Node i has token tokens[i] and parent parents[i]: -1 = the root, otherwise an index < i
    (BFS/topological order). A chain is parents == (-1, 0, 1, ..., n-2). Any sequences of ints are
    accepted and stored as tuples of Python ints.
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        tokens = tuple(int(t) for t in self.tokens)
        parents = tuple(int(p) for p in self.parents)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)
        if len(tokens) != len(parents):
            raise ValueError(
                f"tokens and parents differ in length: {len(tokens)} != {len(parents)}"
            )
        _check_parents(parents)
        seen: set[tuple[int, int]] = set()
        for i, key in enumerate(zip(parents, tokens)):
            if key in seen:
                raise ValueError(
                    f"node {i} repeats token {key[1]} under parent {key[0]}: siblings must differ"
                )
            seen.add(key)

    @staticmethod
    def empty() -> DraftTree:
        return DraftTree((), ())

    @staticmethod
    def chain(tokens: Iterable[int]) -> DraftTree:
        """One guess per position: node i is the child of node i-1."""
        tokens = tuple(tokens)
        return DraftTree(tokens, tuple(range(-1, len(tokens) - 1)))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def is_chain(self) -> bool:
        return self.parents == tuple(range(-1, len(self.parents) - 1))

    def depths(self) -> tuple[int, ...]:
        """Depth of each node: 1 for a child of the root."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        return tuple(depths)

    def children(self, node: int) -> list[int]:
        """The children of `node` (-1 = the root), in node order: the first is the best guess."""
        if not -1 <= node < len(self):
            raise IndexError(f"node {node} out of range for a tree of {len(self)} nodes")
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path(self, node: int) -> list[int]:
        """Node indices from depth 1 down to `node` (inclusive)."""
        if not 0 <= node < len(self):
            raise IndexError(f"node {node} out of range for a tree of {len(self)} nodes")
        path: list[int] = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def best_path(self) -> DraftTree:
        """The chain through the first child at every level (the proposer's best guess at each
        depth)."""
        first_child: dict[int, int] = {}
        for i, parent in enumerate(self.parents):
            first_child.setdefault(parent, i)
        tokens: list[int] = []
        node = first_child.get(-1)
        while node is not None:
            tokens.append(self.tokens[node])
            node = first_child.get(node)
        return DraftTree.chain(tokens)

    def truncated(self, n: int) -> DraftTree:
        """The first n nodes (a tree again, since parents come before their children)."""
        if n < 0:
            raise ValueError(f"cannot truncate to {n} nodes")
        if n >= len(self):
            return self
        return DraftTree(self.tokens[:n], self.parents[:n])


def tree_mask(parents: Sequence[int]) -> np.ndarray:
    """Tree attention mask, bool (n+1, n+1) over rows [root, node 0, ..., node n-1].

    mask[a, b] is True iff row b is row a or an ancestor of it; the root is an ancestor of every
    node.
    """
    _check_parents(parents)
    n = len(parents)
    mask = np.zeros((n + 1, n + 1), dtype=bool)
    mask[0, 0] = True
    for i, parent in enumerate(parents):
        mask[i + 1] = mask[parent + 1]
        mask[i + 1, i + 1] = True
    return mask


def ancestor_positions(parents: Sequence[int], start: int) -> list[list[int]]:
    """For rows [root, node 0, ...] written at cache positions start + row: each row's
    ancestors-and-self positions, root first. Row 0 -> [start]; node i -> [start, ..., start + 1 +
    i]."""
    _check_parents(parents)
    rows: list[list[int]] = [[start]]
    for i, parent in enumerate(parents):
        rows.append(rows[parent + 1] + [start + 1 + i])
    return rows
