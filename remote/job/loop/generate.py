"""The generation stage: every selected prompt through the engine, a continuous window of requests in
flight. Resumable (records already written are skipped by id), capped (first N prompts per dataset,
a token budget), durable (one complete line per record, fsync every second), re-cappable live."""

from __future__ import annotations

import asyncio
import contextlib
import time

from ...common.caps import Caps
from ...common.status import DatasetState, JobState
from ..engine import continuation
from ..observe.status_builder import progress
from ..store.datasets import BadInput, DatasetRun
from ..store.rates import ActiveTime
from ..store.writer import RecordWriter
from . import stage
from .control_requests import Every
from .dispatcher import Dispatcher
from .scheduler import Scheduler


class GenerateStage(stage.Stage):
    def __init__(self, runner, caps: Caps, force: bool):
        super().__init__(runner)  # its caps are its scheduler's, its fault its dispatcher's
        paths, job, log = runner.paths, runner.job, runner.log
        self.writer = RecordWriter(log, self._disk_full)
        self.scheduler = Scheduler(paths, job, caps, self.writer, log, force)
        self.dispatcher: Dispatcher | None = None
        self.kept_why_not: str | None = None
        periods = {"prompts": 2.5, "sync": 1.0, "disk": 3.0, "history": 60.0}  # seconds
        self.clocks = {chore: Every(s) for chore, s in periods.items()}

    @property
    def caps(self) -> Caps:
        return self.scheduler.caps

    @property
    def runs(self) -> dict[str, DatasetRun]:
        return self.scheduler.runs

    @property
    def fatal(self) -> str | None:
        return self.dispatcher.fatal if self.dispatcher else None

    def _disk_full(self, why: str) -> None:
        msg = f"disk full ({why}): answers wait, no new requests"
        self.runner.notifier.send("disk_full", self.runner.notify_message(msg))

    # ------------------------------------------------------------------ the runner asks

    def prepare(self) -> None:
        before = self.runner.before
        self.scheduler.prepare(before.made if before is not None else None)

    def recap(self, caps: Caps) -> None:
        unknown = self.scheduler.unknown(caps)
        if unknown:
            raise BadInput(f"unknown dataset {', '.join(unknown)}")
        self.scheduler.apply_caps(caps)

    def caps_line(self) -> str:
        return self.scheduler.caps_line()

    def start_lines(self) -> list[str]:
        lines = []
        if self.job.engine.kind == "simulate":
            lines.append(
                "engine is `simulate`: a built-in stand-in, no model is called (records say "
                'model "simulated")'
            )
        lines.append("caps: " + self.scheduler.caps_line())
        for name, run in self.runs.items():
            todo = run.target_n - run.done_in_target
            state = "already complete" if run.state() == DatasetState.COMPLETE else f"{todo} to do"
            lines.append(f"{name}: {run.done_in_target}/{run.target_n} done, {state}")
        return lines

    def in_flight(self) -> int:
        return self.dispatcher.in_flight if self.dispatcher else 0

    def progress_at(self) -> float:
        return self.writer.last_completion

    def stall_line(self, idle: float) -> str:
        return f"no answer finished for {idle:.0f}s"

    def engine_fault(self) -> str | None:
        return self.dispatcher.engine_error if self.dispatcher else None

    def tick(self) -> None:
        """Its chores, each on its own clock (the runner calls it every quarter second)."""
        if self.clocks["prompts"].due():
            self.scheduler.notice_changed_prompts()
        if self.clocks["sync"].due():
            for run in self.runs.values():
                run.out.sync()
                run.err.sync()
        if self.clocks["disk"].due() and self.writer.unwritten:
            self.writer.flush()
        if self.clocks["history"].due() and self.runner.state == JobState.RUNNING:
            self.history.record(self.runner.status_now(), self.made())

    def stopping(self) -> None:
        d = self.dispatcher
        if d is not None and d.kept is not None:
            d.kept.flush()  # at once: a kill -9 after the grace period loses nothing more

    @contextlib.asynccontextmanager
    async def session(self):
        """The engine opened and the window ready: yields the work to run until done."""
        runner = self.runner
        try:
            async with self.runner.open_engine() as engine, self.watching(engine):
                eng = self.job.engine
                d = self.dispatcher = Dispatcher(
                    engine, self.pool, self.scheduler, self.writer, eng, self.log, runner.stop
                )
                d.recovering_at = self.recovering_at
                d.kept, self.kept_why_not = continuation.keeping(
                    self.job, self.paths.kept, self.runs, self.log
                )
                keeping = asyncio.ensure_future(d.kept.keep_forever()) if d.kept else None
                try:
                    yield d.window()
                finally:
                    if keeping is not None:
                        keeping.cancel()
            d.end_streak()
        finally:
            if self.dispatcher is not None and self.dispatcher.kept is not None:
                self.dispatcher.kept.close()
            self.scheduler.close()

    async def abandon(self) -> int:
        return await self.dispatcher.abandon()

    def status(self, now: float) -> dict:
        """What status.json says of the work, beside the runner's own fields: every stage's
        (`work_status`), with the answers' rates, ETA, disk and kept answers."""
        d, p = self.dispatcher, self._progress(now)
        if d:  # the answers' window keeps its fault and retries: said as every stage says them
            self.engine_error, self.retries = d.engine_error, d.retries
        return self.work_status(
            p.datasets,
            reloaded=self.scheduler.reloaded,
            tokens_per_s=p.tokens_per_s,
            samples_per_s=p.samples_per_s,
            mean_tokens_per_s=self.writer.active.per_s(now),
            eta_s=p.eta_s,
            eta_guess=p.guess,
            last_completion_at=self.writer.last_completion,
            disk=self.writer.disk(self.paths.outputs, now, self.runner.started_at, p.pace),
            kept=continuation.kept_status(d, self.kept_why_not),
            made={n: a.kept(now) for n, a in self.made().items()},
        )

    def last_data_at(self, url: str) -> float | None:
        return self.dispatcher.engine.last_data_at(url) if self.dispatcher else None

    def made(self) -> dict[str, ActiveTime]:
        """Each dataset's tokens and the time they were being made in, and the job's (""): what the
        next runner's rates start from."""
        return {**{n: r.active for n, r in self.runs.items()}, "": self.writer.active}

    def progress_line(self) -> str:
        return self._progress(time.time()).line()

    def _progress(self, now: float):
        w, meter = self.writer, self.dispatcher.meter if self.dispatcher else None
        return progress(
            self.job,
            self.runs,
            now,
            self.runner.started_at,
            w.active,
            w.first_completion,
            meter.streaming(now) if meter else None,
            meter.per_s(now) if meter else 0.0,
        )

    def summary(self) -> str:
        return self.scheduler.summary()

    def finished(self) -> str:
        errors = sum(len(r.failed) for r in self.runs.values())
        if errors:
            return (
                f"{errors} prompts failed permanently: see *.errors.jsonl; a restart retries them"
            )
        return ""

    def ended(self) -> None:
        # its last minute counts in the job's rate too
        self.history.record(self.runner.status_now(), self.made())
        if self.writer.unwritten:
            n = len(self.writer.unwritten)
            self.log(f"{n} answers still waiting for disk space are dropped: redone on resume")
