"""Tokens as they stream: what each answer in flight has made and its own speed, and the tokens per
second over the last minute, answers finished or not.

A record counts its tokens only at its end, so a rate over records trails the engine by an
answer's length: a runner's first minute, a restart onto a slower engine or the last long answer
of a job were not seen until they ended. The meter sees them within a second. Reading a stream
costs one count per chunk (Assembly's); the rate is sampled when it is read, once a second at
most, so it costs nothing per token."""

from __future__ import annotations

import collections
import contextlib
import contextvars
import time

from ..store.rates import RATE_WINDOW, Streaming

_FLOW: contextvars.ContextVar[Flow | None] = contextvars.ContextVar("flow", default=None)


class Flow:
    """One answer in flight. Its engine says what it has made: a stream's chunks (`asm`, an
    Assembly) or a stand-in's clock (`simulate`)."""

    __slots__ = ("dataset", "sent", "before", "asm", "_pace")

    def __init__(self, dataset: str, sent: float):
        self.dataset, self.sent = dataset, sent
        self.before = 0  # tokens of it made before this request (a kept part continued)
        self.asm = None
        self._pace: tuple[float, int, float] | None = None  # a stand-in's (start, tokens, per s)

    def simulate(self, start: float, tokens: int, per_s: float) -> None:
        self._pace = (start, tokens, per_s)

    def made(self, now: float) -> int:
        """Tokens this request has made so far."""
        if self._pace is not None:
            start, tokens, per_s = self._pace
            return min(tokens, int(max(0.0, now - start) * per_s))
        return self.asm.count if self.asm is not None else 0

    def seen(self, now: float) -> Streaming:
        made, seconds = self.made(now), now - self.sent
        return Streaming(self.before + made, made / seconds if made and seconds >= 1 else None)


def current() -> Flow | None:
    """The answer the running task is asking for (None outside the meter's `flow`)."""
    return _FLOW.get()


class StreamMeter:
    def __init__(self, now: float | None = None):
        self.live: set[Flow] = set()
        self.ended = 0  # tokens of the requests ended, however
        start = time.time() if now is None else now
        self.samples: collections.deque = collections.deque([(start, 0)])  # (t, tokens so far)

    @contextlib.contextmanager
    def flow(self, dataset: str):
        """One request of `dataset` for as long as it runs: the engine's task finds it (`current`)."""
        f = Flow(dataset, time.time())
        self.live.add(f)
        token = _FLOW.set(f)
        try:
            yield f
        finally:
            _FLOW.reset(token)
            self.live.discard(f)
            self.ended += f.made(time.time())

    def total(self, now: float) -> int:
        return self.ended + sum(f.made(now) for f in self.live)

    def per_s(self, now: float) -> float:
        """Tokens per second over the last minute (the meter's life while it is younger); 0 until
        a second has been seen."""
        total, s = self.total(now), self.samples
        if now - s[-1][0] >= 1.0:
            s.append((now, total))
        while len(s) > 2 and s[1][0] <= now - RATE_WINDOW:
            s.popleft()
        t0, n0 = s[0]
        return round((total - n0) / (now - t0), 1) if now - t0 >= 1.0 else 0.0

    def streaming(self, now: float) -> dict[str, list[Streaming]]:
        """The answers in flight, per dataset: what each has made and its own speed."""
        out: dict[str, list[Streaming]] = {}
        for f in self.live:
            out.setdefault(f.dataset, []).append(f.seen(now))
        return out
