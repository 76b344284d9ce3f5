"""copied_share: the share of an answer a proposer drafting from seen text could copy at best."""

import random

import pytest

from roofline.speculation import copied_share


def brute(context, answer, span):
    # token i is covered when some window of `span` tokens holding it starts at p and the same
    # tokens start at an earlier q (the windows may overlap)
    text, start = list(context) + list(answer), len(context)
    covered = set()
    for p in range(len(text) - span + 1):
        if p + span <= start:
            continue
        if any(text[q : q + span] == text[p : p + span] for q in range(p)):
            covered.update(range(max(p, start), p + span))
    return len(covered) / len(answer) if answer else 0.0


def test_a_verbatim_copy_is_all_copied_and_new_text_is_not():
    context = list(range(100, 140))
    assert copied_share(context, context[5:30]) == 1.0
    assert copied_share(context, list(range(200, 230))) == 0.0
    assert copied_share(context, []) == 0.0


def test_runs_shorter_than_the_span_do_not_count():
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    # 7 tokens copied, then new: below a span of 8 nothing counts, at 7 the seven do
    answer = [1, 2, 3, 4, 5, 6, 7, 50, 51, 52]
    assert copied_share(context, answer, span=8) == 0.0
    assert copied_share(context, answer, span=7) == pytest.approx(0.7)


def test_an_answer_repeating_itself_counts_its_second_copy():
    block = list(range(300, 310))
    assert copied_share([1, 2], block + block) == pytest.approx(0.5)


def test_matches_a_brute_force_count_on_random_text():
    rng = random.Random(7)
    for _ in range(200):
        vocab = rng.choice([2, 3, 5])
        context = [rng.randrange(vocab) for _ in range(rng.randrange(0, 30))]
        answer = [rng.randrange(vocab) for _ in range(rng.randrange(0, 30))]
        span = rng.choice([1, 2, 3, 4])
        assert copied_share(context, answer, span) == pytest.approx(brute(context, answer, span))


def test_span_must_be_positive():
    with pytest.raises(ValueError, match="span"):
        copied_share([1], [1], span=0)
