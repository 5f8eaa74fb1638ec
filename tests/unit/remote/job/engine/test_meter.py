"""Tokens as they stream: each answer in flight's tokens and own speed, per dataset, and the
rate over the last minute, answers finished or not."""

from __future__ import annotations

import asyncio

from remote.job.engine import meter
from remote.job.engine.meter import StreamMeter
from remote.job.engine.stream import Assembly


def test_a_stream_is_counted_as_its_chunks_come_token_ids_or_a_delta_a_token():
    a = Assembly()
    a.add({"choices": [{"delta": {"reasoning": "th"}, "token_ids": [1, 2, 3]}]})
    a.add({"choices": [{"delta": {"content": "x"}}]})  # no ids sent: a delta is a token
    a.add({"choices": [{"text": "y"}]})  # /v1/completions
    a.add({"choices": [], "usage": {"completion_tokens": 5}})  # the usage chunk: none
    assert a.count == 5


def test_the_answers_in_flight_say_per_dataset_what_each_made_and_its_own_speed(monkeypatch):
    m = StreamMeter(now=0.0)
    clock = [100.0]
    monkeypatch.setattr(meter.time, "time", lambda: clock[0])
    with m.flow("B1") as f:
        assert meter.current() is f  # the engine's task finds it
        f.asm = Assembly()
        f.asm.count = 30
        f.before = 10  # a kept part, made before this request
        with m.flow("B2") as g:
            g.simulate(start=100.0, tokens=500, per_s=4.0)
            got = m.streaming(110.0)
            assert sorted(got) == ["B1", "B2"]
            (b1,) = got["B1"]
            assert (b1.tokens, b1.per_s) == (40, 3.0)  # this request's 30 over its 10 s
            assert (got["B2"][0].tokens, got["B2"][0].per_s) == (40, 4.0)
            assert m.streaming(100.5)["B1"][0].per_s is None  # under a second: not measured
            clock[0] = 110.0
        assert meter.current() is f
    assert meter.current() is None
    assert m.streaming(110.0) == {} and m.total(110.0) == 70  # what they made counts once ended


def test_the_rate_is_over_the_last_minute_and_sampled_when_read():
    m = StreamMeter(now=0.0)
    assert m.per_s(0.5) == 0.0  # under a second seen: none
    m.ended = 600
    assert m.per_s(10.0) == 60.0  # its life while younger than a minute
    for t in range(11, 201):
        m.ended += 10  # 10 tok/s from then on
        m.per_s(float(t))
    assert m.per_s(200.0) == 10.0  # the last minute only: the early burst has left the window
    assert len(m.samples) <= 62  # a sample a second, a minute's worth


def test_a_flow_ends_with_its_task_whatever_ends_it():
    m = StreamMeter(now=0.0)

    async def ask():
        with m.flow("B1"):
            await asyncio.sleep(3600)

    async def main():
        t = asyncio.ensure_future(ask())
        await asyncio.sleep(0)
        assert len(m.live) == 1
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert not m.live and meter.current() is None

    asyncio.run(main())
