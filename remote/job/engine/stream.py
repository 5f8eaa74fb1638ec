"""A streamed answer (server-sent events), put back together into the body a non-streamed answer has,
so both make the same record; and the watchdog that abandons a request that stops making progress.

Reading costs little per token: events are split from whatever the socket delivers (no await per
line), and deadlines are kept by one watchdog for every request (no timer per token)."""

from __future__ import annotations

import asyncio
import json
import time

_DELTAS = ("content", "reasoning", "reasoning_content")


class Assembly:
    """The deltas of one answer: content, thinking (`reasoning` or `reasoning_content`), token ids,
    finish_reason, usage."""

    def __init__(self, split: "ThinkingSplit | None" = None):
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.token_ids: list | None = None
        self.prompt_token_ids: list | None = None
        self.finish_reason = None
        self.usage: dict | None = None
        self.model = None
        self.count = 0  # tokens so far: its token ids where sent, else a delta a token (the meter)
        # /v1/completions (a continuation) streams raw `text`: split at the end of the thinking here
        self.split = split

    def add(self, chunk: dict) -> None:
        if chunk.get("error"):  # vLLM reports an engine error inside the stream
            raise ValueError(f"error in the stream: {str(chunk['error'])[:200]}")
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self.count += len(ids)
            elif any(isinstance(delta.get(k), str) for k in _DELTAS) or choice.get("text"):
                self.count += 1
            for key, into in zip(_DELTAS, (self.content, self.reasoning, self.reasoning)):
                if isinstance(delta.get(key), str):
                    into.append(delta[key])
            if isinstance(choice.get("text"), str) and choice["text"]:
                if self.split is None:
                    self.content.append(choice["text"])
                else:
                    self.split.feed(
                        choice["text"], self.reasoning, self.content, choice.get("token_ids")
                    )
            if isinstance(choice.get("prompt_token_ids"), list):  # /v1/completions puts it here
                self.prompt_token_ids = choice["prompt_token_ids"]
            if isinstance(ids, list):
                if self.token_ids is None:
                    self.token_ids = []
                self.token_ids.extend(ids)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def reply(self) -> dict:
        """What the non-streamed answer's body would have been (null where nothing came)."""
        if self.finish_reason is None:
            raise ValueError("the stream ended without a finish_reason")
        if self.split is not None:
            self.split.end(self.reasoning)
        return {
            "model": self.model,
            "choices": [
                {
                    "message": {
                        "content": "".join(self.content) or None,
                        "reasoning": "".join(self.reasoning) or None,
                    },
                    "finish_reason": self.finish_reason,
                    "token_ids": self.token_ids,
                }
            ],
            "usage": self.usage or {},
            "prompt_token_ids": self.prompt_token_ids,
        }


class ThinkingSplit:
    """Raw text that may still be inside the thinking, split where the end-of-thinking marker is, as
    the server's reasoning parser splits a chat answer (the marker itself in neither part). A marker
    cut across two chunks is held back until the next one says which it is."""

    def __init__(self, marker: str, thinking: bool, end_id: int | None = None):
        self.marker, self.thinking, self.held, self.end_id = marker, thinking, "", end_id

    def feed(self, text: str, reasoning: list, content: list, ids=None) -> None:
        if not self.thinking:
            content.append(text)
            return
        if self.end_id is not None and ids == [self.end_id]:
            # the marker alone in its chunk: its whole text dropped, as vLLM's chat parser does
            self.end(reasoning)
            self.thinking = False
            return
        text = self.held + text
        i = text.find(self.marker)
        if i >= 0:
            self.thinking, self.held = False, ""
            reasoning.append(text[:i])
            if text[i + len(self.marker) :]:
                content.append(text[i + len(self.marker) :])
            return
        keep = next(
            (n for n in range(len(self.marker) - 1, 0, -1) if text.endswith(self.marker[:n])), 0
        )
        self.held = text[len(text) - keep :] if keep else ""
        reasoning.append(text[: len(text) - keep])

    def end(self, reasoning: list) -> None:
        if self.held:
            reasoning.append(self.held)
            self.held = ""


class Progress:
    """One request's clock, read by the watchdog: when it was sent, when something last arrived."""

    __slots__ = ("task", "sent", "last", "why", "url")

    def __init__(self, task: asyncio.Task, url: str = ""):
        self.task, self.sent, self.last, self.why = task, time.monotonic(), None, None
        self.url = url


async def read_stream(content, progress: Progress, got: Assembly | None = None) -> dict:
    """Every `data:` event of an aiohttp StreamReader until [DONE], as one reply body. `got` is
    read while it fills (the kept tokens of an unfinished answer)."""
    got = got if got is not None else Assembly()
    buf = b""
    async for data in content.iter_any():
        progress.last = time.monotonic()
        buf += data
        *events, buf = buf.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments, event names, a stray \r
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return got.reply()
                got.add(json.loads(payload))
    raise ValueError("the stream ended before [DONE]")


class Watchdog:
    """Cancels a streamed request that got no first byte within first_token_timeout of being sent, or
    nothing new within progress_timeout; the request learns why from its Progress."""

    def __init__(self, first_token_timeout: float, progress_timeout: float):
        self.first, self.gap = first_token_timeout, progress_timeout
        self.watched: set[Progress] = set()
        self.last_by_url: dict[str, float] = {}  # finished streams' last bytes (monotonic)

    def watch(self, url: str = "") -> Progress:
        p = Progress(asyncio.current_task(), url)
        self.watched.add(p)
        return p

    def done(self, p: Progress) -> None:
        self.watched.discard(p)
        if p.last is not None:
            self.last_by_url[p.url] = max(self.last_by_url.get(p.url, 0.0), p.last)

    def last_data_at(self, url: str) -> float | None:
        """When a stream from `url` last delivered bytes (wall clock): the watcher's sign of life."""
        times = [p.last for p in self.watched if p.url == url and p.last is not None]
        times.append(self.last_by_url.get(url, 0.0))
        last = max(times)
        return None if not last else time.time() - (time.monotonic() - last)

    def check(self, now: float) -> None:
        for p in list(self.watched):
            if p.last is None and now - p.sent > self.first:
                p.why = f"no first token for {self.first:g}s"
            elif p.last is not None and now - p.last > self.gap:
                p.why = f"no new token for {self.gap:g}s"
            else:
                continue
            self.watched.discard(p)
            p.task.cancel()

    async def run(self) -> None:
        tick = max(0.05, min(1.0, self.first / 4, self.gap / 4))
        while True:
            await asyncio.sleep(tick)
            self.check(time.monotonic())
