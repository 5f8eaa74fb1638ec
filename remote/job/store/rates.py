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
