"""DraftTree, the tree attention mask and the ancestor positions, against trees built by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.engine.runtime.speculate.tree import DraftTree, ancestor_positions, tree_mask

# Tree B:   root -> 0(5) -> 2(7) -> 4(9)
#                -> 1(6) -> 3(8)
TREE_B = DraftTree((5, 6, 7, 8, 9), (-1, -1, 0, 1, 2))
# Tree C:   root -> 0(1), 1(2), 2(3) -> 3(4)
TREE_C = DraftTree((1, 2, 3, 4), (-1, -1, -1, 2))


def test_chain_mask_is_causal_and_positions_are_prefixes():
    chain = DraftTree.chain([11, 12, 13])
    assert chain.parents == (-1, 0, 1)
    assert chain.is_chain
    expected = np.array(
        [
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(tree_mask(chain.parents), expected)
    assert ancestor_positions(chain.parents, 10) == [[10], [10, 11], [10, 11, 12], [10, 11, 12, 13]]


def test_two_branch_tree_by_hand():
    # rows: root, node0 .. node4
    expected = np.array(
        [
            [1, 0, 0, 0, 0, 0],  # root
            [1, 1, 0, 0, 0, 0],  # node0 <- root
            [1, 0, 1, 0, 0, 0],  # node1 <- root
            [1, 1, 0, 1, 0, 0],  # node2 <- node0
            [1, 0, 1, 0, 1, 0],  # node3 <- node1
            [1, 1, 0, 1, 0, 1],  # node4 <- node2
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(tree_mask(TREE_B.parents), expected)
    assert ancestor_positions(TREE_B.parents, 100) == [
        [100],
        [100, 101],
        [100, 102],
        [100, 101, 103],
        [100, 102, 104],
        [100, 101, 103, 105],
    ]
    assert TREE_B.depths() == (1, 1, 2, 2, 3)
    assert TREE_B.children(-1) == [0, 1]
    assert TREE_B.children(0) == [2]
    assert TREE_B.children(1) == [3]
    assert TREE_B.children(4) == []
    assert TREE_B.path(4) == [0, 2, 4]
    assert TREE_B.path(3) == [1, 3]
    assert TREE_B.best_path() == DraftTree.chain([5, 7, 9])
    assert TREE_B.truncated(3) == DraftTree((5, 6, 7), (-1, -1, 0))
    assert not TREE_B.is_chain


def test_wide_tree_by_hand():
    expected = np.array(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 0, 1, 0, 0],
            [1, 0, 0, 1, 0],
            [1, 0, 0, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(tree_mask(TREE_C.parents), expected)
    assert ancestor_positions(TREE_C.parents, 0) == [[0], [0, 1], [0, 2], [0, 3], [0, 3, 4]]
    assert TREE_C.depths() == (1, 1, 1, 2)
    assert TREE_C.best_path() == DraftTree.chain([1])  # the first child has no children


def test_empty_tree():
    empty = DraftTree.empty()
    assert len(empty) == 0 and empty.is_chain
    assert DraftTree.chain([]) == empty
    assert empty.best_path() == empty
    np.testing.assert_array_equal(tree_mask(empty.parents), np.array([[True]]))
    assert ancestor_positions(empty.parents, 7) == [[7]]
    assert empty.children(-1) == []


def test_truncated_edges():
    assert TREE_B.truncated(0) == DraftTree.empty()
    assert TREE_B.truncated(99) == TREE_B
    with pytest.raises(ValueError):
        TREE_B.truncated(-1)


def test_inputs_are_normalised_to_int_tuples():
    tree = DraftTree(np.array([3, 4]), [-1, np.int64(0)])
    assert tree.tokens == (3, 4) and tree.parents == (-1, 0)
    assert all(type(t) is int for t in tree.tokens + tree.parents)


@pytest.mark.parametrize(
    ("tokens", "parents", "message"),
    [
        ((1, 2), (-1,), "differ in length"),
        ((1,), (0,), r"parents\[0\] = 0"),
        ((1, 2), (-1, 1), r"parents\[1\] = 1"),
        ((1, 2), (-1, -2), r"parents\[1\] = -2"),
        ((1, 1), (-1, -1), "siblings must differ"),
        ((1, 2, 2), (-1, 0, 0), "siblings must differ"),
    ],
)
def test_invalid_trees_are_rejected(tokens, parents, message):
    with pytest.raises(ValueError, match=message):
        DraftTree(tokens, parents)


def test_same_token_under_different_parents_is_fine():
    tree = DraftTree((1, 2, 1, 1), (-1, -1, 0, 1))
    assert tree.depths() == (1, 1, 2, 2)


def test_mask_rejects_invalid_parents():
    with pytest.raises(ValueError):
        tree_mask([0])
    with pytest.raises(ValueError):
        ancestor_positions([-1, 3], 0)


def test_children_and_path_reject_out_of_range():
    with pytest.raises(IndexError):
        TREE_B.children(5)
    with pytest.raises(IndexError):
        TREE_B.path(-1)


@st.composite
def trees(draw) -> DraftTree:
    n = draw(st.integers(0, 20))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    # distinct tokens: siblings always differ
    return DraftTree(tuple(range(100, 100 + n)), tuple(parents))


@settings(max_examples=200, deadline=None)
@given(trees(), st.integers(0, 1000))
def test_mask_and_positions_agree_with_paths(tree, start):
    mask = tree_mask(tree.parents)
    rows = ancestor_positions(tree.parents, start)
    assert mask.shape == (len(tree) + 1, len(tree) + 1)
    assert mask[:, 0].all()
    assert rows[0] == [start]
    for node in range(len(tree)):
        path_rows = [0] + [i + 1 for i in tree.path(node)]
        assert np.flatnonzero(mask[node + 1]).tolist() == path_rows
        assert rows[node + 1] == [start + r for r in path_rows]
        assert len(tree.path(node)) == tree.depths()[node]
    for n in range(len(tree) + 1):  # a prefix of the nodes has the top-left block of the mask
        np.testing.assert_array_equal(tree_mask(tree.truncated(n).parents), mask[: n + 1, : n + 1])


@settings(max_examples=200, deadline=None)
@given(trees())
def test_best_path_follows_first_children(tree):
    best = tree.best_path()
    assert best.is_chain
    node, expected = -1, []
    while tree.children(node):
        node = tree.children(node)[0]
        expected.append(tree.tokens[node])
    assert list(best.tokens) == expected
