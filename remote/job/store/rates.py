"""One rate window: amounts (tokens, records, bytes) over the last minute, per second."""

from __future__ import annotations

import collections

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
    """Tokens and the seconds they were made in: the time between two events, less any gap of
    IDLE_GAP_S or more (a job stopped overnight, a restart with nothing to do), so a rate over it
    is the job's speed while it ran, not diluted by the hours it stood still."""

    __slots__ = ("seconds", "tokens", "last")

    def __init__(self, seconds: float = 0.0, tokens: int = 0):
        self.seconds, self.tokens, self.last = seconds, tokens, None

    def add(self, t: float, tokens: int) -> None:
        if self.last is not None and 0 <= t - self.last < IDLE_GAP_S:
            self.seconds += t - self.last
        self.tokens += tokens
        self.last = t

    def plus(self, other: ActiveTime) -> ActiveTime:
        return ActiveTime(self.seconds + other.seconds, self.tokens + other.tokens)

    def per_s(self) -> float | None:
        return round(self.tokens / self.seconds, 1) if self.seconds >= 1 else None
