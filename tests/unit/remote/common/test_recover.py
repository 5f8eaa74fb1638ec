"""The watcher's rules, each alone with a fake clock: the restart budget and its backoff, the wedge
rule, watch.json read back."""

from __future__ import annotations

import json

from remote.common.recover import (
    BACKOFF_CAP,
    Budget,
    Observation,
    RecoverSpec,
    WatchState,
    WedgeClock,
)
from remote.common.status import ProcessWatch


def test_budget_backoff_doubles_to_the_cap_then_gives_up():
    b = Budget(RecoverSpec(max_restarts=3, window=3600, backoff=10))
    delays = []
    now = 1000.0
    while (d := b.failed(now)) is not None:
        delays.append(d)
        now += d
        assert b.restarting(now) == len(delays)
    # a first death is started again at once, then the backoff doubles; the fourth death gives up
    assert delays == [0, 10, 20]
    big = Budget(RecoverSpec(max_restarts=20, backoff=100))
    for _ in range(5):
        big.restarting(0.0)
    assert big.failed(1.0) == BACKOFF_CAP


def test_budget_forgets_restarts_outside_the_window():
    b = Budget(RecoverSpec(max_restarts=2, window=100, backoff=1))
    b.restarting(0.0)
    b.restarting(10.0)
    assert b.failed(50.0) is None  # two restarts within 100 s: spent
    assert b.failed(105.0) == 1.0  # the first has left the window: one restart left, the backoff
    assert b.attempt(111.0) == 1
    assert b.failed(111.0) == 0.0  # both have: a first death again, started at once


def obs(now, gen=None, prompt=None, running=None, in_flight=0, models_ok=False, last=None):
    return Observation(now, gen, prompt, running, models_ok, in_flight, last)


def test_wedge_busy_with_frozen_counters():
    c = WedgeClock(after=60, ready_at=0.0)
    assert c.observe(obs(10, gen=100, prompt=50, running=4)) is None
    assert c.observe(obs(40, gen=100, prompt=50, running=4)) is None
    why = c.observe(obs(75, gen=100, prompt=50, running=4))
    assert why and "wedged" in why and "4 request(s)" in why


def test_wedge_never_for_a_busy_engine_that_moves_either_counter():
    c = WedgeClock(after=60, ready_at=0.0)
    for t in range(0, 600, 20):  # a long prefill: generation still, prompt tokens move
        assert c.observe(obs(t, gen=100, prompt=50 + t, running=1)) is None


def test_wedge_idle_time_never_counts_and_streams_count_as_progress():
    c = WedgeClock(after=60, ready_at=0.0)
    assert c.observe(obs(500, gen=100, prompt=50, running=0)) is None  # idle for 500 s
    assert c.observe(obs(530, gen=100, prompt=50, in_flight=8)) is None  # busy since 500
    # a stream delivered bytes at 580 although /metrics reads stale: not wedged at 600
    assert c.observe(obs(600, gen=100, prompt=50, in_flight=8, last=580.0)) is None
    assert c.observe(obs(645, gen=100, prompt=50, in_flight=8, last=580.0))


def test_wedge_when_nothing_answers_and_loading_never_counts():
    c = WedgeClock(after=60, ready_at=1000.0)  # ready at 1000: the load before it is not counted
    assert c.observe(obs(1030)) is None
    why = c.observe(obs(1061))
    assert why and "neither /metrics nor /v1/models" in why
    c2 = WedgeClock(after=60, ready_at=0.0)
    assert c2.observe(obs(100, models_ok=True)) is None  # /v1/models answers: alive, idle


def test_watch_state_reads_back(tmp_path):
    ws = WatchState(
        pid=5, server=ProcessWatch(state="fatal", log=["CUDA error"]), server_ready_seq=2
    )
    (tmp_path / "w.json").write_text(json.dumps(ws.to_dict()))
    back = WatchState.read(tmp_path / "w.json")
    assert back == ws and back.server.recovering is False
    assert ProcessWatch(state="starting").recovering
