"""One rate window: amounts (tokens, records, bytes) over the last minute, per second."""

from __future__ import annotations

import collections
from dataclasses import dataclass

RATE_WINDOW = 60.0


class RateWindow:
    """`add` when something happens; reading never changes what is held (old entries are dropped as
    new ones come), so a status can be built as often as wanted without side effects."""

    def __init__(self, span: float = RATE_WINDOW):
        self.span = span
        self._events: collections.deque = collections.deque()  # (t, amount)

    def add(self, t: float, amount: float) -> None:
        self._events.append((t, amount))
        while self._events and self._events[0][0] < t - self.span:
            self._events.popleft()

    def _recent(self, now: float):
        return (a for t, a in self._events if t >= now - self.span)

    def total(self, now: float) -> float:
        return sum(self._recent(now))

    def count(self, now: float) -> int:
        return sum(1 for _ in self._recent(now))

    def per_s(self, now: float, started: float, amount: float | None = None) -> float:
        """Amount per second over the window (the whole run while it is younger than the window)."""
        total = self.total(now) if amount is None else amount
        return total / max(1.0, min(self.span, now - started))


IDLE_GAP_S = 120.0  # nothing made for this long: the job was not running (stopped, nothing to do)


class ActiveTime:
    """Tokens and the seconds they were being made in: the time at least one of its requests was
    in flight (a dataset's own, or any, for the job), every runner's. A rate over it is its speed
    while its answers were being made: not diluted by the hours a job stood still or by another
    dataset's turn, and, with nothing in flight, fixed (a complete dataset's no longer moves).
    Timed from the send, so a first answer's length counts: a gap between records would leave it
    out (a dataset of 12 answers made together read as ten times its speed)."""

    __slots__ = ("seconds", "tokens", "flying", "since")

    def __init__(self, seconds: float = 0.0, tokens: int = 0):
        self.seconds, self.tokens = seconds, tokens
        self.flying = 0  # its requests in flight now
        self.since: float | None = None  # when the one of them that opened the span was sent

    def sent(self, t: float) -> None:
        if not self.flying:
            self.since = t
        self.flying += 1

    def ended(self, t: float) -> None:
        """A request ended, however (answered, failed, cancelled)."""
        self.flying -= 1
        if not self.flying and self.since is not None:
            self.seconds += max(0.0, t - self.since)
            self.since = None

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def seconds_at(self, now: float) -> float:
        return self.seconds + (max(0.0, now - self.since) if self.since is not None else 0.0)

    def kept(self, now: float) -> list[float]:
        """[seconds, tokens] as status.json and run/history.jsonl keep it."""
        return [round(self.seconds_at(now), 3), self.tokens]

    @classmethod
    def of_kept(cls, v) -> ActiveTime | None:
        """What `kept` wrote; None for anything else (a line no release wrote)."""
        if isinstance(v, list) and len(v) == 2:
            return cls(float(v[0]), int(v[1]))
        return None

    def plus(self, other: ActiveTime) -> ActiveTime:
        return ActiveTime(self.seconds + other.seconds, self.tokens + other.tokens)

    def per_s(self, now: float) -> float | None:
        """Tokens over the seconds; None while a request of a span under a second is in flight (a
        figure of its first answers alone). With none in flight it is fixed, whatever its length
        (a dataset whose rows were all made in 0.4 s has their rate)."""
        seconds = round(self.seconds_at(now), 3)  # as history keeps it: one figure after a restart
        if seconds <= 0 or (self.flying and seconds < 1):
            return None
        return round(self.tokens / seconds, 1)


@dataclass(frozen=True)
class Streaming:
    """An answer in flight: the tokens it has made so far (a kept part included) and its own
    stream's speed (None until it has streamed a second)."""

    tokens: int
    per_s: float | None

    def left_s(self, expected: float) -> float:
        """Seconds until it reaches `expected` tokens at its own speed (0: past it, or unmeasured)."""
        if not self.per_s or self.tokens >= expected:
            return 0.0
        return (expected - self.tokens) / self.per_s
