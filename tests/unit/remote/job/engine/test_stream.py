"""A streamed answer put back together as the non-streamed body, the thinking split from raw text
where its end marker is (a marker cut across chunks included), and the watchdog's two deadlines."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from remote.job.engine.stream import Assembly, Progress, ThinkingSplit, Watchdog, read_stream


class Chunks:
    """What aiohttp's StreamReader gives `read_stream`: bytes cut anywhere."""

    def __init__(self, *parts: bytes):
        self.parts = parts

    async def iter_any(self):
        for p in self.parts:
            yield p


def event(**chunk) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def delta(**d) -> dict:
    return {"choices": [{"delta": d}]}


def test_deltas_become_the_body_a_non_streamed_answer_has():
    a = Assembly()
    a.add({"model": "m", "prompt_token_ids": [1, 2], **delta(reasoning="thin")})
    a.add(delta(reasoning_content="king"))
    a.add({"choices": [{"delta": {"content": "hi"}, "token_ids": [7, 8]}]})
    a.add({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"completion_tokens": 2}})
    body = a.reply()
    assert body["choices"][0]["message"] == {"content": "hi", "reasoning": "thinking"}
    assert body["choices"][0]["token_ids"] == [7, 8] and body["prompt_token_ids"] == [1, 2]
    assert (body["model"], body["usage"]) == ("m", {"completion_tokens": 2})


def test_an_error_in_the_stream_or_no_finish_is_no_answer():
    with pytest.raises(ValueError, match="error in the stream: engine dead"):
        Assembly().add({"error": "engine dead"})
    a = Assembly()
    a.add(delta(content="half"))
    with pytest.raises(ValueError, match="without a finish_reason"):
        a.reply()


def test_raw_text_is_split_at_the_marker_even_cut_across_chunks():
    reasoning, content = [], []
    s = ThinkingSplit("</think>", thinking=True)
    for piece in ("let me ", "see</th", "ink>The answer", " is 4"):
        s.feed(piece, reasoning, content)
    assert "".join(reasoning) == "let me see" and "".join(content) == "The answer is 4"
    reasoning, content = [], []
    s = ThinkingSplit("</think>", thinking=True)
    s.feed("ends in </th", reasoning, content)
    s.end(reasoning)  # the stream ended: what was held back was thinking after all
    assert "".join(reasoning) == "ends in </th" and content == []


def test_the_marker_alone_as_a_token_is_dropped_whole():
    reasoning, content = [], []
    s = ThinkingSplit("</think>", thinking=True, end_id=99)
    s.feed("hmm", reasoning, content, ids=[5])
    s.feed("\n</think>\n", reasoning, content, ids=[99])
    s.feed("yes", reasoning, content, ids=[6])
    assert (reasoning, content) == (["hmm"], ["yes"])


def test_read_stream_reads_events_cut_anywhere_until_done():
    whole = event(model="m", **delta(content="a")) + event(
        choices=[{"delta": {"content": "b"}, "finish_reason": "length"}]
    )
    parts = [whole[:7], whole[7:30], whole[30:] + b": a comment\n\ndata: [DONE]\n\n"]

    async def go():
        p = Progress(asyncio.current_task())
        return await read_stream(Chunks(*parts), p), p

    body, p = asyncio.run(go())
    assert body["choices"][0]["message"]["content"] == "ab" and p.last is not None
    with pytest.raises(ValueError, match="before \\[DONE\\]"):
        asyncio.run(short())


async def short():
    return await read_stream(Chunks(event(**delta(content="a"))), Progress(asyncio.current_task()))


def test_the_watchdog_cancels_no_first_token_and_no_new_token():
    async def go():
        dog = Watchdog(first_token_timeout=5, progress_timeout=2)

        async def request(url):
            p = dog.watch(url)
            await asyncio.sleep(3600)
            return p

        silent = asyncio.create_task(request("a"))
        stalled = asyncio.create_task(request("b"))
        await asyncio.sleep(0)
        t0 = time.monotonic()
        ps = {p.url: p for p in dog.watched}
        ps["b"].last = t0  # a first token came
        dog.check(t0 + 1)
        assert len(dog.watched) == 2  # within both deadlines
        dog.check(t0 + 3)  # b: nothing new for 3 s
        dog.check(t0 + 6)  # a: no first token for 6 s
        for t in (silent, stalled):
            with pytest.raises(asyncio.CancelledError):
                await t
        return ps

    ps = asyncio.run(go())
    assert ps["a"].why == "no first token for 5s" and ps["b"].why == "no new token for 2s"


def test_last_data_at_remembers_finished_streams_per_server():
    dog = Watchdog(10, 10)
    p = Progress(None, "http://a")
    p.last = time.monotonic() - 4
    dog.done(p)
    assert dog.last_data_at("http://b") is None
    assert abs(time.time() - dog.last_data_at("http://a") - 4) < 1
