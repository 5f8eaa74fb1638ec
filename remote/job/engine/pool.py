"""The servers one job sends its requests to: dispatch, health, probing.

Each server keeps up to `concurrency` requests in flight; a new request goes to the reachable server
with the fewest (the answers' stage; a stage that asks items binds its workers to one server each).
A server that refuses connections or drops them is marked down, its requests are asked again (the
answers' go back to the queue, another server may take them), and it is probed with backoff until
it answers again. vLLM does the batching; this only decides where each request goes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from ...common.status import EndpointStatus, ServerMetrics
from ..store.rates import RateWindow
from .client import backoff

STUCK_WINDOW = 600.0  # "recently", for stuck requests: the last 10 minutes


@dataclass
class Endpoint:
    url: str
    concurrency: int
    in_flight: int = 0
    reachable: bool = True
    down_since: float | None = None
    last_error: str | None = None
    requests: int = 0
    errors: int = 0
    probe_attempt: int = 0
    next_probe: float = 0.0
    check_now: bool = False  # a request timed out: ask whether the server is still there
    metrics: ServerMetrics | None = None
    tokens: RateWindow = field(default_factory=RateWindow)  # tokens of answers
    stuck: int = 0  # requests abandoned for no progress
    recent_stuck: RateWindow = field(default_factory=lambda: RateWindow(STUCK_WINDOW))
    recent_answers: RateWindow = field(default_factory=lambda: RateWindow(STUCK_WINDOW))

    def degraded(self, now: float) -> bool:
        return self.status(now, now).degraded  # the rule lives in EndpointStatus

    def status(self, now: float, started: float) -> EndpointStatus:
        return EndpointStatus(
            url=self.url,
            reachable=self.reachable,
            in_flight=self.in_flight,
            concurrency=self.concurrency,
            tokens_per_s=round(self.tokens.per_s(now, started), 1),
            requests=self.requests,
            errors=self.errors,
            down_since=self.down_since,
            last_error=self.last_error,
            metrics=self.metrics,
            stuck=self.stuck,
            stuck_recent=self.recent_stuck.count(now),
            answered_recent=self.recent_answers.count(now),
        )


class Pool:
    def __init__(
        self, urls: list[str], concurrency: int, retry_base: float, log: Callable[[str], None]
    ):
        self.endpoints = [Endpoint(u, concurrency) for u in urls]
        self.retry_base = retry_base
        self.log = log

    @property
    def capacity(self) -> int:
        return sum(e.concurrency for e in self.endpoints)

    def pick(self) -> Endpoint | None:
        """The reachable server with the fewest requests in flight and a free slot; None if none."""
        free = [e for e in self.endpoints if e.reachable and e.in_flight < e.concurrency]
        return min(free, key=lambda e: e.in_flight, default=None)

    def statuses(
        self, now: float, started: float, last_data_at: Callable[[str], float | None]
    ) -> list[EndpointStatus]:
        out = []
        for e in self.endpoints:
            st = e.status(now, started)
            st.last_token_at = last_data_at(e.url)
            out.append(st)
        return out

    def any_reachable(self) -> bool:
        return any(e.reachable for e in self.endpoints)

    def all_down_since(self) -> float | None:
        """Since when no server has been reachable (None while one is)."""
        if self.any_reachable():
            return None
        return max(e.down_since or 0.0 for e in self.endpoints)

    def answered(self, e: Endpoint, tokens: int, now: float) -> None:
        e.requests += 1
        e.tokens.add(now, tokens)
        e.recent_answers.add(now, 1)

    def stuck(self, e: Endpoint, now: float) -> None:
        e.stuck += 1
        e.recent_stuck.add(now, 1)

    def mark_down(self, e: Endpoint, why: str, now: float) -> None:
        e.last_error = why
        if not e.reachable:
            return
        e.reachable, e.down_since = False, now
        e.probe_attempt, e.next_probe = 0, now + backoff(0, self.retry_base)
        others = sum(1 for x in self.endpoints if x.reachable)
        then = (
            f"{others} other server(s) carry on"
            if others
            else "no server left: waiting for one to answer"
        )
        self.log(
            f"server {e.url} unreachable: {why}; its {e.in_flight} request(s) in flight are asked "
            f"again as they fail; {then}"
        )

    def gone_too_long(self, now: float, deadline: float, recovering_at: float = 0.0) -> str | None:
        """Why the job fails (None: not yet): every server unreachable for `deadline` seconds,
        counted from `recovering_at` where the watcher has been bringing one back since."""
        down = self.all_down_since()
        if down is None or now - max(down, recovering_at) <= deadline:
            return None
        one = len(self.endpoints) == 1
        what = "engine unreachable" if one else "every engine server unreachable"
        return f"{what} for {now - max(down, recovering_at):.0f}s"

    def mark_up(self, e: Endpoint, now: float) -> None:
        if not e.reachable:
            self.log(f"server {e.url} reachable again after {now - (e.down_since or now):.0f}s")
        e.reachable, e.down_since, e.check_now = True, None, False

    async def probe_forever(
        self, probe: Callable[[str], Awaitable[str | None]], tick: float = 0.25
    ) -> None:
        """Probe every down (or suspect) server when its backoff is due; `probe(url)` returns None when the
        server answers, else why not. Off the request path: the window never waits for it."""
        pending: dict[str, asyncio.Task] = {}

        async def one(e: Endpoint) -> None:
            why = await probe(e.url)
            now = time.time()
            if why is None:
                self.mark_up(e, now)
                return
            e.check_now = False
            self.mark_down(e, why, now)
            e.probe_attempt += 1
            e.next_probe = now + backoff(min(e.probe_attempt, 6), self.retry_base)

        try:
            while True:
                now = time.time()
                for e in self.endpoints:
                    due = (not e.reachable and now >= e.next_probe) or e.check_now
                    if due and e.url not in pending:
                        t = asyncio.ensure_future(one(e))
                        pending[e.url] = t
                        t.add_done_callback(lambda _t, url=e.url: pending.pop(url, None))
                await asyncio.sleep(tick)
        finally:
            for t in pending.values():
                t.cancel()
