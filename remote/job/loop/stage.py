"""What a stage gives the runner (a kind of work: the answers, the hidden states, a draft measured),
and what a stage need not say when it has nothing of its own there."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from contextlib import AbstractAsyncContextManager
from typing import Awaitable

from ...common.caps import Caps
from ...common.stages import stage_of
from ...common.status import EngineStatus
from ..engine.pool import Pool
from ..observe.telemetry import Telemetry
from ..observe.watched import WatchView
from ..store.history import History


class Stage:
    """Made with (runner, caps, force). `runner`: the process it works in (its paths, job, log,
    stop state, notifier)."""

    caps: Caps  # what it runs now
    fatal: str | None = None  # the job's own fault: the runner fails with it

    def __init__(self, runner):
        self.runner, self.paths, self.job = runner, runner.paths, runner.job
        self.log, self.stop = runner.log, runner.stop
        self.engine_error: str | None = None  # why the engine cannot be asked, for status
        self.urls: list[str] = []  # the servers it asks
        self.pool: Pool | None = None  # their health, once asked (alerts and status read it)
        self.telemetry: Telemetry | None = None  # their /metrics and the GPUs, sampled
        # the watcher's: a server it started again is asked at once, and its down time not counted
        self.watch_view = WatchView(self.paths.watch_state, server_pid=self.paths.server_pid)
        self.retries = 0
        self.made_at = time.time()  # when it last finished something: a stall is timed from it
        # run/history.jsonl: every stage's runner starts (its minute lines are the answers')
        self.history = History(self.paths.history)

    def started(self) -> None:
        """At work: the start said in the history (`report` counts every stage's)."""
        spec = stage_of(self.caps.stage)
        self.history.start(time.time(), os.getpid(), None if spec.makes_answers else spec.name)

    def progress_at(self) -> float:
        return self.made_at

    def requests_out(self) -> int:
        """Requests at a server now (a try waiting out its backoff is none), else its work out."""
        return sum(e.in_flight for e in self.pool.endpoints) if self.pool else self.in_flight()

    def recovering_at(self) -> float:
        return self.watch_view.recovering_at

    def stall_after(self) -> float:  # silent this long with work out: stalled
        return self.job.engine.stall_minutes * 60

    def stall_line(self, idle: float) -> str:
        return f"nothing finished for {idle:.0f}s"

    def engine_fault(self) -> str | None:  # why the engine cannot be asked now, for an alert
        return self.engine_error

    def last_data_at(self, url: str) -> float | None:  # a server's last byte (None: not kept)
        return None

    def open_pool(self, urls: list[str]) -> Pool:
        """The servers it asks, each `engine.concurrency` at a time."""
        eng = self.job.engine
        self.urls = list(urls)
        self.pool = Pool(self.urls, eng.concurrency, eng.retry_base, self.log)
        return self.pool

    @contextlib.asynccontextmanager
    async def watching(self, engine=None):
        """While it works: its servers (`engine`'s; none for a stage that asks none) probed while
        down, their /metrics and the GPUs sampled every engine.metrics_interval."""
        eng, pool, background = self.job.engine, None, []
        if engine is not None:
            pool = self.open_pool(engine.base_urls)
            background.append(asyncio.ensure_future(pool.probe_forever(engine.probe)))
        if eng.metrics_interval > 0:
            self.telemetry = Telemetry(engine, pool.endpoints if pool else [], eng.metrics_interval)
            background.append(asyncio.ensure_future(self.telemetry.run()))
        try:
            yield pool
        finally:
            for t in background:
                t.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    def prepare(self) -> None:  # open what it works on; BadInput: exit 2, nothing done
        raise NotImplementedError

    def recap(self, caps: Caps) -> None:  # new caps live; BadInput or ValueError: refused
        raise NotImplementedError

    def caps_line(self) -> str:
        return self.caps.line()

    def start_lines(self) -> list[str]:  # what the log says of it as it starts
        raise NotImplementedError

    def in_flight(self) -> int:
        raise NotImplementedError

    def tick(self) -> None:  # its chores, every quarter second
        pass

    def stopping(self) -> None:  # a stop came: save what must outlive a kill -9 now
        pass

    # the engine opened: yields the work, which ends when every item is done or a stop came
    def session(self) -> AbstractAsyncContextManager[Awaitable]:
        raise NotImplementedError

    async def abandon(self) -> int:  # the grace period is over: what was cut off
        raise NotImplementedError

    def status(self, now: float) -> dict:  # status.json's fields of the work
        raise NotImplementedError

    def progress_line(self) -> str:  # done/target, as a notification says it
        raise NotImplementedError

    def summary(self) -> str:  # per dataset done/target, for the log
        raise NotImplementedError

    def finished(self) -> str:  # what a finished run says beside its state ("" for nothing)
        return ""

    def ended(self) -> None:  # after the run, before the last status
        pass

    def work_status(self, datasets: dict, **more) -> dict:
        """status.json's fields of a stage that asks its `urls` for items, per dataset."""
        eng, rows, pool = self.job.engine, datasets.values(), self.pool
        now, started = time.time(), self.runner.started_at
        return dict(
            engine=EngineStatus(
                kind=eng.kind,
                model=self.runner.model_name,
                base_urls=list(self.urls),
                reachable=pool.any_reachable() if pool else self.engine_error is None,
                down_since=pool.all_down_since() if pool else None,
                last_error=self.engine_error,
            ),
            endpoints=pool.statuses(now, started, self.last_data_at) if pool else [],
            gpus=self.telemetry.gpus if self.telemetry else None,
            concurrency=eng.concurrency * max(1, len(self.urls)),
            in_flight=self.in_flight(),
            completion_tokens=sum(d.completion_tokens for d in rows),
            errors=sum(d.errors for d in rows),
            retries=self.retries,
            datasets=datasets,
            stage=self.caps.stage,
            **more,
        )
