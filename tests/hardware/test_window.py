"""The bandwidth window of a run: measured before and after (fake measurements here), held against
the higher, the drift shown only when it is large."""

from __future__ import annotations

import pytest

from roofline.hardware.window import (
    DRIFT_NOTE_FRACTION,
    BandwidthWindow,
    drift_fraction,
    measure_window,
)


def fake_measure(values):
    it = iter(values)
    return lambda: next(it)


def test_window_measures_before_and_after_the_run_in_that_order():
    events = []

    def measure():
        events.append("measure")
        return (30e9 if len(events) == 1 else 33e9), "gemv"

    def run():
        events.append("run")
        return "result"

    result, w = measure_window(run, measure)
    assert result == "result" and events == ["measure", "run", "measure"]
    assert (w.before_bytes_per_s, w.after_bytes_per_s, w.after_kernel) == (30e9, 33e9, "gemv")


@pytest.mark.parametrize("before, after", [(30e9, 33e9), (33e9, 30e9), (31e9, 31e9)])
def test_the_run_is_held_against_the_higher_measurement(before, after):
    _, w = measure_window(lambda: None, fake_measure([(before, "a"), (after, "b")]))
    assert w.bound_bytes_per_s == max(before, after)


def test_a_run_that_raises_is_not_measured_after():
    calls = []

    def measure():
        calls.append(1)
        return 1e9, "k"

    def boom():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        measure_window(boom, measure)
    assert calls == [1]


def test_drift_is_relative_to_the_higher_and_shown_only_when_large():
    assert drift_fraction(30e9, 40e9) == pytest.approx(0.25) == drift_fraction(40e9, 30e9)
    assert drift_fraction(0.0, 0.0) == 0.0
    small = BandwidthWindow(30e9, 32e9)
    large = BandwidthWindow(24e9, 34e9)
    assert not small.drift_is_large() and large.drift_is_large()
    assert large.drift_fraction > DRIFT_NOTE_FRACTION > small.drift_fraction
    assert "drifted 29%" in large.describe() and "drift" not in small.describe()
    assert "before 24.0 GB/s" in large.describe() and "after 34.0 GB/s" in large.describe()
    assert large.describe().startswith("bandwidth 34.0 GB/s")


def test_an_open_window_holds_against_the_measurement_before():
    w = BandwidthWindow(30e9, before_kernel="simd-sum")
    assert w.bound_bytes_per_s == 30e9 and w.drift_fraction is None and not w.drift_is_large()
    assert "right before the run" in w.describe() and "simd-sum" in w.describe()
    closed = w.closed(36e9, "gemv")
    assert (
        closed.bound_bytes_per_s == 36e9
        and closed.before_kernel == "simd-sum"
        and closed.after_kernel == "gemv"
    )
    assert closed.drift_is_large()  # 6 of 36: 16.7%


def test_json_round_trip():
    w = BandwidthWindow(30e9, 36e9, "simd-sum", "gemv")
    d = w.to_json()
    assert d["bound_bytes_per_s"] == 36e9 and d["drift_is_large"] is True
    assert BandwidthWindow.from_json(d) == w
    assert BandwidthWindow.from_json(BandwidthWindow(1e9).to_json()) == BandwidthWindow(1e9)


def test_back_to_back_runs_share_the_probe_between_them():
    from roofline.hardware.window import ProbeChain

    taken = iter(range(1, 100))
    chain = ProbeChain(lambda: (float(next(taken)), "k"))
    windows = []
    for _ in range(3):
        measure = chain.for_run()
        windows.append((measure()[0], measure()[0]))
    # run 1: probes 1 and 2; run 2 starts from run 1's after-probe: 4 probes for 3 runs
    assert windows == [(1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    # a run whose after-probe never came (its ceiling unknown) leaves nothing to carry
    chain.for_run()()
    assert chain.for_run()()[0] == 5.0  # run 4 took 4; run 5 probes afresh


def test_a_chain_writes_its_probe_buffer_once(monkeypatch):
    from roofline.hardware import profile, readbw
    from roofline.hardware.window import ProbeChain

    made = []
    make = readbw.probe_buffer

    def small(size_bytes=None):
        made.append(size_bytes)
        return make(1 << 20)

    monkeypatch.setattr(readbw, "probe_buffer", small)
    monkeypatch.setattr(profile, "note_read_rate", lambda *a, **k: None)
    chain = ProbeChain()
    rates = []
    for _ in range(3):
        measure = chain.for_run()
        rates += [measure(), measure()]
    assert made == [None]  # one buffer for the chain's 4 probes
    assert all(rate > 0 and kernel for rate, kernel in rates)
    rb = readbw.read_bandwidth_now(buf=make(1 << 20), repeats=1, warmup=0)
    assert rb.size_bytes == 1 << 20  # the buffer's own size
