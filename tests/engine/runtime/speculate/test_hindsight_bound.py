"""hindsight_tokens_per_pass: tokens per verify pass for the best drafts seen text allows."""

import random

import pytest

from roofline.speculation import hindsight_tokens_per_pass


def longest_runs(context, answer, max_draft, min_match):
    # run[i]: the most answer tokens from answer position i that continue a place seen before i
    # whose previous min_match tokens equal the ones before i (brute force over every place)
    text, start = list(context) + list(answer), len(context)
    runs = []
    for i in range(start, len(text)):
        best = 0
        for j in range(min_match, i):
            if i < min_match or text[j - min_match : j] != text[i - min_match : i]:
                continue
            run = 0
            while run < max_draft and j + run < i and i + run < len(text):
                if text[j + run] != text[i + run]:
                    break
                run += 1
            best = max(best, run)
        runs.append(best)
    return runs


def fewest_passes(runs):
    # any proposer accepts r <= runs[i] tokens at position i, then the target's token: the fewest
    # passes over all such choices (dynamic programming from the end)
    n = len(runs)
    fewest = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        fewest[i] = 1 + min(fewest[min(n, i + r + 1)] for r in range(runs[i] + 1))
    return fewest[0]


def test_a_verbatim_copy_takes_one_pass_per_draft_plus_the_opening():
    context = list(range(100, 140))  # distinct tokens
    answer = context[5:30]  # 25 tokens
    # pass 1: nothing follows 139 yet -> 105 alone; then 105 was followed by 106..117 (12) + 118,
    # then the last 11 (10 drafted + 1)
    assert hindsight_tokens_per_pass(context, answer, max_draft=12) == pytest.approx(25 / 3)
    # drafts of 0 tokens: one token a pass
    assert hindsight_tokens_per_pass(context, answer, max_draft=0) == 1.0


def test_new_text_and_empty_answers():
    assert hindsight_tokens_per_pass([1, 2, 3], [7, 8, 9], max_draft=8) == 1.0
    assert hindsight_tokens_per_pass([1, 2, 3], [], max_draft=8) == 0.0


def test_a_longer_required_match_drafts_less():
    # "2" was followed by 3 4 5, and "9 2" never: with min_match 1 the tail "2" drafts 3 4 5 in
    # one pass; with min_match 2 the first pass drafts nothing (3 alone), then "2 3" drafts 4 5
    context, answer = [1, 2, 3, 4, 5, 9, 2], [3, 4, 5]
    assert hindsight_tokens_per_pass(context, answer, max_draft=8, min_match=1) == 3.0
    assert hindsight_tokens_per_pass(context, answer, max_draft=8, min_match=2) == 1.5


def test_drafts_copy_only_text_already_seen():
    # the answer repeats the token 5: each pass may copy only what is already there
    context = [5]
    # pass 1: after 5 nothing yet -> 5; then 5 5 seen -> 5 (1) + 5; then 5 5 5 -> 5 5 + 5: 6 tokens
    assert hindsight_tokens_per_pass(context, [5] * 6, max_draft=8) == pytest.approx(6 / 3)


def test_agrees_with_brute_force_and_greedy_is_optimal():
    rng = random.Random(11)
    for _ in range(300):
        vocab = rng.choice([2, 3, 4])
        context = [rng.randrange(vocab) for _ in range(rng.randrange(0, 20))]
        answer = [rng.randrange(vocab) for _ in range(rng.randrange(1, 25))]
        max_draft, min_match = rng.choice([0, 1, 2, 4, 8]), rng.choice([1, 2, 3])
        got = hindsight_tokens_per_pass(context, answer, max_draft, min_match)
        best = fewest_passes(longest_runs(context, answer, max_draft, min_match))
        assert got == pytest.approx(len(answer) / best)


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_draft"):
        hindsight_tokens_per_pass([1], [1], max_draft=-1)
    with pytest.raises(ValueError, match="min_match"):
        hindsight_tokens_per_pass([1], [1], max_draft=4, min_match=0)
