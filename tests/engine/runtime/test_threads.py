"""The adaptive thread count: the choice follows measured pass times, and never changes a result."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from fixtures import greedy_ids
from runner_helpers import LONG_PROMPT, PROMPT, tiny_checkpoint

from roofline.engine.runtime.model_runner import ModelRunner, available_cores
from roofline.engine.runtime.threads import (
    CHANGE_PASSES,
    FEWER_THREADS_LONGEST_INTERVAL,
    FIRST_INTERVAL,
    LONGEST_INTERVAL,
    ThreadChooser,
    candidate_thread_counts,
    prefer_passive_omp_waits,
)


def test_idle_openmp_workers_sleep_unless_the_user_chose_otherwise():
    env: dict[str, str] = {}
    assert prefer_passive_omp_waits(env, modules={}) and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    for name, value in [
        ("OMP_WAIT_POLICY", "ACTIVE"),
        ("GOMP_SPINCOUNT", "100000"),
        ("KMP_BLOCKTIME", "200"),
    ]:
        env = {name: value}
        assert not prefer_passive_omp_waits(env, modules={}) and env == {name: value}
    env = {}
    # too late: left alone
    assert not prefer_passive_omp_waits(env, modules={"torch": object()}) and env == {}


def test_importing_the_engine_sets_the_policy_before_torch_loads():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
    }
    code = (
        "import os, sys, roofline.engine; from roofline.engine import load_runner; "
        "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["PASSIVE", "False"]


def test_candidates_halve_down_to_one():
    assert candidate_thread_counts(1) == (1,)
    assert candidate_thread_counts(2) == (2, 1)
    assert candidate_thread_counts(8) == (8, 4, 2, 1)
    assert candidate_thread_counts(6) == (6, 3, 1)


def drive(chooser: ThreadChooser, seconds_of, passes: int, rows: int = 1) -> list[int]:
    """Run `passes` passes, each taking seconds_of(threads, i); the thread counts used, in order."""
    used = []
    for i in range(passes):
        n = chooser.threads_for_pass()
        used.append(n)
        chooser.record(n, rows, seconds_of(n, i))
    return used


def test_a_busy_core_moves_the_choice_to_one_thread_and_back_when_it_is_free_again():
    chooser = ThreadChooser(2)
    quiet = {2: 0.020, 1: 0.030}
    busy = {2: 0.060, 1: 0.032}
    used = drive(chooser, lambda n, i: quiet[n], 200)
    assert chooser.current == 2 and chooser.switches == 0
    assert used.count(1) <= 200 // FIRST_INTERVAL // 2  # probes back off while they keep losing
    assert chooser.interval == LONGEST_INTERVAL
    used = drive(chooser, lambda n, i: busy[n], 300)
    assert chooser.current == 1 and chooser.switches == 1
    # once switched, two threads only as a probe, at most one every FEWER_THREADS_LONGEST_INTERVAL
    # passes
    assert used[-50:].count(2) <= 50 // FEWER_THREADS_LONGEST_INTERVAL + 1
    drive(chooser, lambda n, i: quiet[n], 300)
    assert chooser.current == 2 and chooser.switches == 2


def test_a_neighbour_arriving_or_leaving_is_noticed_within_a_few_passes():
    """After a long quiet spell the probes are LONGEST_INTERVAL passes apart, yet the switch to one
    thread comes CHANGE_PASSES slow passes after the neighbour starts (plus the probe and its
    confirmation), and the switch back within FEWER_THREADS_LONGEST_INTERVAL passes or so of it
    leaving."""
    chooser = ThreadChooser(2)
    quiet = {2: 0.020, 1: 0.030}
    busy = {2: 0.060, 1: 0.032}
    # a little noise: no false alarm
    drive(chooser, lambda n, i: quiet[n] * (1 + 0.02 * (i % 3)), 300)
    assert chooser.current == 2 and chooser.interval == LONGEST_INTERVAL and chooser.changes == 0
    used = drive(chooser, lambda n, i: busy[n], CHANGE_PASSES + 2)
    assert chooser.current == 1 and chooser.changes == 1 and used == [2] * CHANGE_PASSES + [1, 1]
    drive(chooser, lambda n, i: busy[n], 200)
    assert chooser.current == 1 and chooser.interval == FEWER_THREADS_LONGEST_INTERVAL
    used = drive(chooser, lambda n, i: quiet[n], FEWER_THREADS_LONGEST_INTERVAL + 2)
    assert chooser.current == 2, used


def test_one_lucky_probe_does_not_switch():
    chooser = ThreadChooser(2, first_interval=4)
    # one thread is slower except on the one pass right after the first probe becomes due
    lucky = {"done": False}

    def seconds_of(n, i):
        if n == 1 and not lucky["done"]:
            lucky["done"] = True
            return 0.001
        return {2: 0.020, 1: 0.030}[n]

    drive(chooser, seconds_of, 100)
    assert lucky["done"] and chooser.current == 2 and chooser.switches == 0


def test_probes_compare_passes_of_the_same_row_count_only():
    chooser = ThreadChooser(2, first_interval=2, longest_interval=2)
    # every 1-row pass on 2 threads is slow, but a probe is only ever due on 8-row passes, which
    # have no reference on 2 threads as long as every 8-row pass is a probe: no verdict, no switch
    for _ in range(50):
        n = chooser.threads_for_pass()
        rows = 8 if n == 1 else 1
        chooser.record(n, rows, 0.5 if n == 2 else 0.01)
    assert chooser.current == 2 and chooser.switches == 0


def test_pinned_passes_teach_nothing():
    chooser = ThreadChooser(2)
    chooser.pinned = 1
    assert drive(chooser, lambda n, i: 0.001 if n == 1 else 1.0, 40) == [1] * 40
    chooser.pinned = None
    assert chooser.current == 2 and chooser.switches == 0


def test_greedy_ids_are_identical_with_one_two_and_adaptive_threads():
    """The same greedy ids with one thread, two threads, and the adaptive choice probing every other
    pass (so that passes of one generation run on both counts); a short and a long prompt."""
    most = min(2, available_cores())
    results = {}
    for label, threads in [("one", 1), ("two", most), ("adaptive", None)]:
        runner = ModelRunner(
            tiny_checkpoint("llama"), dtype="fp32", threads=threads, max_batch=1, max_seq_len=128
        )
        if threads is None:
            runner.threads = most
            runner.thread_chooser = ThreadChooser(most, first_interval=1, longest_interval=1)
        results[label] = [greedy_ids(runner, prompt, 40) for prompt in (PROMPT, LONG_PROMPT)]
        if threads is None and most > 1:
            used = runner.thread_chooser.passes_by_threads
            assert used[1] >= 10 and used[most] >= 10, used
    assert results["one"] == results["two"] == results["adaptive"]
    assert len(set(results["one"][0])) > 1  # not a degenerate constant output


def test_seeding_starts_the_choice_from_measured_passes():
    runner = ModelRunner(
        tiny_checkpoint("llama"), dtype="fp32", threads=None, max_batch=1, max_seq_len=64
    )
    chooser = runner.thread_chooser
    assert chooser is not None and chooser.candidates[0] == runner.threads
    seeded = []
    seed = chooser.seed
    chooser.seed = lambda seconds: (seeded.append(seconds), seed(seconds))
    runner.warmup()  # compiles, then seeds
    assert chooser.pinned is None and chooser.current in chooser.candidates
    if len(chooser.candidates) > 1:  # measured, not defaulted: every candidate timed
        assert len(seeded) == 1 and set(seeded[0]) == set(chooser.candidates)
        assert all(t > 0 for times in seeded[0].values() for t in times)
    assert runner.position(0) == 0  # the seeding passes left the cache empty
    fixed = ModelRunner(
        tiny_checkpoint("llama"), dtype="fp32", threads=1, max_batch=1, max_seq_len=64
    )
    assert fixed.thread_chooser is None
    np.testing.assert_array_equal(fixed.prefill(0, PROMPT), runner.prefill(0, PROMPT))


def test_pass_costs_are_timed_on_one_thread_count_whatever_the_chooser_would_probe():
    """A table of costs relative to one row compares passes on the same thread count: probes of
    the other count (here due every pass) are held off while it is measured, and learn nothing."""
    runner = ModelRunner(
        tiny_checkpoint("llama"), dtype="fp32", threads=None, max_batch=1, max_seq_len=64
    )
    runner.threads = 2
    runner.thread_chooser = chooser = ThreadChooser(2, first_interval=1, longest_interval=1)
    used = []
    pick = runner._use_threads

    def spy() -> int:
        used.append(pick())
        return used[-1]

    runner._use_threads = spy
    runner.measure_pass_costs(rows=(1, 2, 3), reps=2)
    assert used and set(used) == {chooser.current}
    assert chooser.pinned is None and chooser.passes_by_threads[1] == 0
    assert runner.position(0) == 0 and set(runner.pass_costs) == {1, 2, 3}
