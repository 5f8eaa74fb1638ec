"""The server pool alone: where a request goes, and what a server going away changes."""

from __future__ import annotations

from remote.job.engine.pool import Pool


def pool(n=2, concurrency=2):
    lines: list[str] = []
    return Pool([f"http://s{i}" for i in range(n)], concurrency, 1.0, lines.append), lines


def test_a_request_goes_to_the_reachable_server_with_the_fewest_in_flight():
    p, _ = pool(3)
    p.endpoints[0].in_flight, p.endpoints[1].in_flight = 1, 0
    p.endpoints[2].reachable = False
    assert p.pick().url == "http://s1"
    p.endpoints[1].in_flight = 2  # full
    assert p.pick().url == "http://s0"
    p.endpoints[0].in_flight = 2
    assert p.pick() is None and p.capacity == 6


def test_down_since_counts_from_the_last_server_lost_and_clears_when_one_is_back():
    p, lines = pool(2)
    p.mark_down(p.endpoints[0], "refused", now=10.0)
    assert p.all_down_since() is None and "1 other server(s) carry on" in lines[-1]
    p.mark_down(p.endpoints[1], "refused", now=15.0)
    assert p.all_down_since() == 15.0 and "no server left" in lines[-1]
    p.mark_down(p.endpoints[1], "still refused", now=20.0)  # said once, the clock not reset
    assert p.all_down_since() == 15.0 and len(lines) == 2
    p.mark_up(p.endpoints[0], now=30.0)
    assert p.all_down_since() is None and "reachable again after 20s" in lines[-1]


def test_a_server_that_went_away_is_probed_after_its_backoff():
    p, _ = pool(1)
    e = p.endpoints[0]
    p.mark_down(e, "refused", now=100.0)
    assert e.next_probe > 100.0 and e.probe_attempt == 0 and e.down_since == 100.0


def test_backoff_doubles_up_to_a_minute_or_to_a_first_wait_asked_longer(monkeypatch):
    from remote.job.engine import client

    monkeypatch.setattr(client.random, "uniform", lambda lo, hi: hi)  # the jitter's top
    assert [client.backoff(a, 1.0) for a in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert client.backoff(0, 1000.0) == client.backoff(5, 1000.0) == 1000.0
    monkeypatch.setattr(client.random, "uniform", lambda lo, hi: lo)
    assert client.backoff(9, 1.0) == 30.0  # full jitter: half to all of it
