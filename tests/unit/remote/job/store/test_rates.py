"""One rate window: what falls out of the minute, and a young run's rate over its own age."""

from __future__ import annotations

from remote.job.store.rates import ActiveTime, RateWindow


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


def test_active_time_is_the_time_its_requests_were_in_flight_from_each_send():
    """A dataset's 12 answers sent together at t=100 and written at t=106..107 were being made
    for 7 s: timed from the send (the gap between its first and last record, 1 s, read as seven
    times its speed), and the hours with nothing in flight left out."""
    a = ActiveTime(seconds=100.0, tokens=1000)  # what the runners before made
    for _ in range(12):
        a.sent(100.0)
    assert a.seconds_at(100.5) == 100.5  # the open span counts while it runs
    for i in range(12):
        a.add(100)
        a.ended(106.0 + i / 11)
    assert (a.seconds, a.tokens) == (107.0, 2200)
    assert a.per_s(107.0) == round(2200 / 107, 1)
    assert a.per_s(107.0 + 5 * 3600) == a.per_s(107.0)  # nothing in flight: it does not move
    a.sent(20_000.0)  # sent again hours later: the gap is no time of its
    a.ended(20_002.0)
    assert a.seconds == 109.0
    assert ActiveTime().per_s(0.0) is None
    young = ActiveTime()
    young.sent(0.0)
    young.add(9)
    assert young.per_s(0.5) is None  # a span under a second still open: its first answers alone
    young.ended(0.5)  # a dataset all made in half a second has its rate (it showed `-` for good)
    assert young.per_s(0.5) == 18.0 == ActiveTime(0.5, 9).per_s(9e9)
    assert ActiveTime(1, 2).plus(ActiveTime(3, 4)).per_s(0.0) == 1.5
