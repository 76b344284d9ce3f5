"""The speculative-decoding flags that `roofline generate` and `roofline serve` share, declared
once.

Each flag maps 1:1 onto a field of `roofline.engine.speculate.base.SpecOptions` (the one config
object); `spec_options` builds it and turns its validation errors into one-line usage errors.
"""

from __future__ import annotations

from typing import Annotated

import typer

from roofline.errors import UserError

Spec = Annotated[
    str,
    typer.Option(
        "--spec",
        help="Speculative decoding: none; ngram (prompt lookup: copy what followed the longest repeated "
        "n-gram); trie (suffix trie over the request's tokens, a draft tree verified in one pass); draft (a cheaper "
        "model drafts: the target's own int8 copy by default). Greedy output stays identical to --spec none.",
    ),
]
SpecK = Annotated[
    int, typer.Option("--spec-k", min=1, help="Tokens drafted per step by ngram and draft.")
]
LookupMin = Annotated[
    int, typer.Option("--prompt-lookup-min", min=1, help="ngram: shortest n-gram to match.")
]
LookupMax = Annotated[
    int, typer.Option("--prompt-lookup-max", min=1, help="ngram: longest n-gram to match.")
]
MaxBreadth = Annotated[
    int,
    typer.Option(
        "--max-bfs-breadth",
        min=1,
        help="trie: children expanded per level for short (uncertain) matches.",
    ),
]
MinBreadth = Annotated[
    int,
    typer.Option(
        "--min-bfs-breadth", min=1, help="trie: children per level for long (confident) matches."
    ),
]
TrieDepth = Annotated[
    int,
    typer.Option("--max-trie-depth", min=2, help="trie: longest n-gram stored (match + draft)."),
]
DraftTokens = Annotated[
    int, typer.Option("--num-draft-tokens", min=1, help="trie: draft tree size (nodes) at most.")
]
TrieScope = Annotated[
    str,
    typer.Option(
        "--trie-scope",
        help="trie: 'request' (each request's own tokens) or "
        "'shared' (one trie across requests: repeated answers help later ones).",
    ),
]
SpecTree = Annotated[
    bool,
    typer.Option(
        "--spec-tree/--spec-chain",
        help="trie: verify the whole draft tree, or only its best path (chain), for comparison.",
    ),
]
DraftDtype = Annotated[
    str,
    typer.Option("--draft-dtype", help="draft: precision of the draft copy (int8, bf16, fp32)."),
]
DraftModel = Annotated[
    str | None,
    typer.Option(
        "--draft-model",
        help="draft: another checkpoint with the same "
        "tokenizer instead of the target's own weights.",
    ),
]
Adaptive = Annotated[
    bool,
    typer.Option(
        "--adaptive/--no-adaptive",
        help="Draft only as much as the measured "
        "acceptance and verify cost make worth it (nothing on unpredictable text).",
    ),
]


def spec_options(
    spec: str,
    spec_k: int,
    prompt_lookup_min: int,
    prompt_lookup_max: int,
    max_bfs_breadth: int,
    min_bfs_breadth: int,
    max_trie_depth: int,
    num_draft_tokens: int,
    trie_scope: str,
    spec_tree: bool,
    draft_dtype: str,
    draft_model: str | None,
    adaptive: bool,
):
    """SpecOptions from the flags; a UserError naming the flag when they do not fit together."""
    from roofline.engine.speculate.base import SpecOptions

    try:
        return SpecOptions(
            method=spec,
            k=spec_k,
            prompt_lookup_min=prompt_lookup_min,
            prompt_lookup_max=prompt_lookup_max,
            max_bfs_breadth=max_bfs_breadth,
            min_bfs_breadth=min_bfs_breadth,
            max_trie_depth=max_trie_depth,
            num_draft_tokens=num_draft_tokens,
            trie_scope=trie_scope,
            tree=spec_tree,
            draft_dtype=draft_dtype,
            draft_model=draft_model,
            adaptive=adaptive,
        )
    except ValueError as e:
        field = str(e).split(" ", 1)[0]
        flag = {"k": "spec-k", "method": "spec", "tree": "spec-tree"}.get(
            field, field.replace("_", "-")
        )
        raise UserError(f"--{flag}: {e}") from None
