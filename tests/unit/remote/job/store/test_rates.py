"""One rate window: what falls out of the minute, and a young run's rate over its own age."""

from __future__ import annotations

from remote.job.store.rates import IDLE_GAP_S, ActiveTime, RateWindow


def test_only_the_last_minute_counts_and_reading_changes_nothing():
    w = RateWindow(span=60)
    w.add(0.0, 100)
    w.add(30.0, 50)
    assert (w.total(30.0), w.count(30.0)) == (150, 2)
    assert (w.total(61.0), w.count(61.0)) == (50, 1)  # the first fell out of the window
    assert w.total(30.0) == 150  # reading dropped nothing: an earlier time still sees both
    w.add(200.0, 10)  # adding drops what is older than the window for good
    assert (w.count(200.0), w.total(200.0)) == (1, 10)


def test_per_second_over_the_window_or_the_run_while_it_is_younger():
    w = RateWindow(span=60)
    for t in range(0, 10):
        w.add(float(t), 6)
    assert w.per_s(10.0, started=0.0) == 6.0  # 60 over the run's 10 s, not over 60 s
    assert w.per_s(10.0, started=9.5) == 60.0  # never divided by less than a second
    assert w.per_s(100.0, started=0.0) == 0.0
    assert w.per_s(100.0, started=0.0, amount=120) == 2.0  # a given amount, over the full window


def test_active_time_counts_the_seconds_tokens_were_made_in_not_the_idle_gaps():
    a = ActiveTime(seconds=100.0, tokens=1000)  # what the runners before made
    for t, n in ((5000.0, 10), (5010.0, 10), (5020.0, 10), (5020.0 + IDLE_GAP_S, 10)):
        a.add(t, n)
    assert (a.seconds, a.tokens) == (120.0, 1040)
    assert a.per_s() == round(1040 / 120, 1)
    assert ActiveTime().per_s() is None and ActiveTime(0.5, 9).per_s() is None  # too short to say
    assert ActiveTime(1, 2).plus(ActiveTime(3, 4)).per_s() == 1.5
