"""The runner: every selected prompt through the engine, a continuous window of requests in flight.

Resumable (records already written are skipped by id), capped (first N prompts per dataset, a token
budget), durable (one complete line per record, fsync every second), and re-cappable while running
(run/control.json). This module wires the pieces and runs their lifecycle; each piece lives in a room
of its own (see remote/__init__.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from ...common.caps import HIDDEN_STATES, Caps
from ...common.jobspec import JOB_TOKEN_ENV, JobSpec, Paths, release_dir
from ...common.notify import Notifier
from ...common.protocol import GRACE_S
from ...common.state import ControlRequest, ServerKeys, keep_caps
from ...common.status import DatasetState, EngineStatus, JobState, JobStatus
from ..engine import continuation
from ..engine.kinds import make_engine
from ..engine.pool import Pool
from ..observe.alerts import AlertWatcher
from ..observe.status_builder import progress, stalled
from ..observe.telemetry import Telemetry
from ..observe.watched import WatchView
from ..observe.watcher_guard import WatcherGuard
from ..store.datasets import BadInput, DatasetRun
from ..store.history import History
from ..store.writer import RecordWriter
from .control_requests import ControlWatcher, Every, StopState
from .dispatcher import Dispatcher
from .own_process import LockHeld, Log, acquire_lock, runner_fields, write_pidfile
from .scheduler import Scheduler
from .stage_runner import HiddenRunner

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class Runner:
    def __init__(
        self,
        paths: Paths,
        job: JobSpec,
        caps: Caps,
        *,
        grace: float = GRACE_S,
        force: bool = False,
        echo: bool = False,
    ):
        self.paths, self.job, self.grace = paths, job, grace
        self.log = Log(paths.log, echo)
        eng = job.engine
        self.concurrency = eng.concurrency  # per server
        self.stall_after = eng.stall_minutes * 60
        self.metrics_interval = eng.metrics_interval
        self.model_name = "simulated" if eng.kind == "simulate" else eng.model
        self.state, self.message = JobState.STARTING, ""
        self.started_at = time.time()
        self.token = os.environ.get(JOB_TOKEN_ENV) or os.urandom(8).hex()
        self.abandoned = 0  # in-flight requests cut off by a stop (redone on resume)
        self.stop = StopState()  # the dispatcher reads the same one
        self.notifier = Notifier(job.notify, paths.root, self.log)
        self.history = History(paths.history)
        self.writer = RecordWriter(self.log, self._disk_full)
        self.scheduler = Scheduler(
            paths, job, caps, self.fingerprint(), self.writer, self.log, force
        )
        self.control = ControlWatcher(paths, self.token)
        self.watch_view = WatchView(paths.watch_state, server_pid=paths.server_pid)
        self.watcher_guard = WatcherGuard(
            paths,
            self.log,
            lambda event, what: self.notifier.send(event, self.notify_message(what)),
        )
        self.alerts = AlertWatcher(
            self.notifier,
            self.log,
            self.stall_after,
            eng.down_deadline,
            self.notify_message,
        )
        self.pool: Pool | None = None
        self.dispatcher: Dispatcher | None = None
        self.kept_why_not: str | None = None
        self.telemetry: Telemetry | None = None

    @property
    def runs(self) -> dict[str, DatasetRun]:
        return self.scheduler.runs

    def fingerprint(self) -> dict:
        return {
            "model": self.model_name,
            "sampling": self.job.sampling,
            "chat_template_kwargs": self.job.chat_template_kwargs,
            "extra_body": self.job.extra_body,
        }

    def prepare(self) -> None:
        self.scheduler.prepare()

    def _disk_full(self, why: str) -> None:
        msg = f"disk full ({why}): answers wait, no new requests"
        self.notifier.send("disk_full", self.notify_message(msg))

    # ------------------------------------------------------------------ while it runs

    def _apply_control(self, req: ControlRequest) -> None:
        if req.grace is not None:  # `stop --grace S` says how long in-flight work gets
            self.grace = max(0.0, float(req.grace))
        d = self.dispatcher
        if req.drain:
            self.stop.drain()
            n = d.in_flight if d else 0
            self.log(f"control {self.control.seq}: drain: no new requests; finishing {n} in flight")
            return
        if req.caps is not None:
            try:
                caps = Caps.from_dict(req.caps)
                unknown = self.scheduler.unknown(caps)
                if unknown:
                    raise BadInput(f"unknown dataset {', '.join(unknown)}")
                self.scheduler.apply_caps(caps)
                keep_caps(self.paths, caps)
                self.control.error = None
                self.log(f"control {self.control.seq}: caps now " + self.scheduler.caps_line())
            except (BadInput, OSError, ValueError) as e:
                self.control.error = str(e)
                self.log(f"control {self.control.seq}: refused: {e}")
        self.write_status()  # the caller waits for control_seq: answer now, not at the next tick

    def check_control(self) -> None:
        req = self.control.poll()
        if req is not None:
            self._apply_control(req)

    async def _housekeeping(self) -> None:
        prompts, status, disk, history = Every(2.5), Every(1.0), Every(3.0), Every(60.0)
        while True:
            self.check_control()  # a stat() every 0.25 s: a re-cap lands fast
            self.watch_view.reprobe(time.time(), self.pool, self.log)
            if prompts.due():
                self.scheduler.notice_changed_prompts()
            if status.due():
                for run in self.runs.values():
                    run.out.sync()
                    run.err.sync()
                self.write_status()
                self.watcher_guard.check(time.time())
                d = self.dispatcher
                self.alerts.check(
                    time.time(),
                    self.state,
                    d.in_flight if d else 0,
                    self.writer.last_completion,
                    self.pool,
                    d.engine_error if d else None,
                )
            if disk.due() and self.writer.unwritten:
                self.writer.flush()
            if history.due() and self.state == JobState.RUNNING:
                self.history.record(self.status_now())
            await asyncio.sleep(0.25)

    # ------------------------------------------------------------------ what it reports

    def notify_message(self, what: str) -> str:
        """One line: where, what happened, done/target, tokens, ETA."""
        import platform

        p = progress(self.job, self.runs, time.time(), self.started_at)
        return f"{platform.node()}:{self.paths.root}: {what}; {p.line()}"

    def status_now(self) -> JobStatus:
        now = time.time()
        p = progress(self.job, self.runs, now, self.started_at)
        d, pool = self.dispatcher, self.pool
        in_flight = d.in_flight if d else 0
        return JobStatus(
            **runner_fields(self, now, self.scheduler.caps),
            reloaded=self.scheduler.reloaded,
            abandoned=self.abandoned,
            engine=EngineStatus(
                kind=self.job.engine.kind,
                model=self.model_name,
                base_urls=[e.url for e in pool.endpoints] if pool else [],
                reachable=pool is None or pool.any_reachable(),
                down_since=pool.all_down_since() if pool else None,
                last_error=d.engine_error if d else None,
            ),
            endpoints=pool.statuses(now, self.started_at, d.engine.last_data_at)
            if pool and d
            else [],
            concurrency=pool.capacity if pool else self.concurrency,
            in_flight=in_flight,
            tokens_per_s=p.tokens_per_s,
            samples_per_s=p.samples_per_s,
            mean_tokens_per_s=self.writer.active.per_s(),
            completion_tokens=sum(x.completion_tokens for x in p.datasets.values()),
            errors=sum(x.errors for x in p.datasets.values()),
            retries=d.retries if d else 0,
            eta_s=p.eta_s,
            stalled=stalled(
                self.state, in_flight, self.writer.last_completion, now, self.stall_after
            ),
            last_completion_at=self.writer.last_completion,
            datasets=p.datasets,
            gpus=self.telemetry.gpus if self.telemetry else None,
            disk=self.writer.disk(self.paths.outputs, now, self.started_at),
            notified=list(self.notifier.sent),
            kept=continuation.kept_status(d, self.kept_why_not),
            watcher_restarts=self.watcher_guard.restarts,
        )

    def write_status(self) -> None:
        try:
            self.status_now().write(self.paths.status)  # every second
        except OSError as e:
            self.log(f"cannot write {self.paths.status.name}: {e}")

    # ------------------------------------------------------------------ lifecycle

    def _on_signal(self, signame: str, stop_event: asyncio.Event) -> None:
        self.check_control()  # a stop writes its grace period there just before the signal
        d = self.dispatcher
        if self.stop.stop():
            self.log(f"{signame} again: stopping now")
            self.grace = 0
        if d is not None:
            if d.kept is not None:
                d.kept.flush()  # at once: a kill -9 after the grace period loses nothing more
        stop_event.set()
        n = d.in_flight if d else 0
        self.log(f"{signame}: no new requests; {n} in flight get {self.grace:g}s to finish")

    async def _until_done_or_stopped(self, window: asyncio.Task, stop_event: asyncio.Event) -> None:
        stopper = asyncio.ensure_future(stop_event.wait())
        await asyncio.wait({window, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if window.done():
            return
        # stopping: the window dispatches nothing more; in-flight requests get the grace period
        deadline = time.monotonic() + self.grace
        while not window.done() and time.monotonic() < deadline and self.grace > 0:
            await asyncio.wait({window}, timeout=0.2)
        if not window.done():
            window.cancel()
            self.abandoned = await self.dispatcher.abandon()
            await asyncio.gather(window, return_exceptions=True)
            self.log(
                f"grace period over: {self.abandoned} in-flight requests abandoned (they are redone on resume)"
            )

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig.name, stop_event)
        house = asyncio.ensure_future(self._housekeeping())
        try:
            keys = ServerKeys.read(self.paths.server_keys)
            async with make_engine(self.job, keys.keys if keys else None) as engine:
                eng = self.job.engine
                self.pool = Pool(engine.base_urls, self.concurrency, eng.retry_base, self.log)
                self.dispatcher = Dispatcher(
                    engine, self.pool, self.scheduler, self.writer, eng, self.log, self.stop
                )
                self.dispatcher.recovering_at = lambda: self.watch_view.recovering_at
                self.dispatcher.kept, self.kept_why_not = continuation.keeping(
                    self.job, self.paths.kept, self.runs, self.log
                )
                background = [asyncio.ensure_future(self.pool.probe_forever(engine.probe))]
                if self.dispatcher.kept is not None:
                    background.append(asyncio.ensure_future(self.dispatcher.kept.keep_forever()))
                if self.metrics_interval > 0:
                    self.telemetry = Telemetry(engine, self.pool.endpoints, self.metrics_interval)
                    background.append(asyncio.ensure_future(self.telemetry.run()))
                self.history.start(time.time(), os.getpid())
                self.state = JobState.RUNNING
                self.write_status()
                window = asyncio.ensure_future(self.dispatcher.window())
                await self._until_done_or_stopped(window, stop_event)
                for t in background:
                    t.cancel()
                if window.done() and not window.cancelled() and window.exception():
                    raise window.exception()
            self.dispatcher.end_streak()
            return self._verdict()
        finally:
            house.cancel()
            if self.dispatcher is not None and self.dispatcher.kept is not None:
                self.dispatcher.kept.close()
            self.scheduler.close()

    def _verdict(self) -> int:
        d = self.dispatcher
        if d.fatal:
            self.state, self.message = JobState.FAILED, d.fatal
            self.log(f"failed: {d.fatal}")
            return EXIT_FAILED
        if self.stop.asked:
            self.state, self.message = JobState.STOPPED, self.stop.verdict()
            self.log(f"stopped: {self.scheduler.summary()}")
            return EXIT_OK
        self.state = JobState.FINISHED
        errors = sum(len(r.failed) for r in self.runs.values())
        if errors:
            self.message = (
                f"{errors} prompts failed permanently: see *.errors.jsonl; a restart retries them"
            )
        self.log(f"finished: {self.scheduler.summary()}" + (f"; {self.message}" if errors else ""))
        return EXIT_OK

    def _log_start(self) -> None:
        eng = self.job.engine
        self.log(
            f"runner start pid {os.getpid()} release {release_dir()} engine "
            f"{eng.kind} ({self.model_name}) concurrency {self.concurrency}"
        )
        if eng.kind == "simulate":
            self.log(
                'engine is `simulate`: a built-in stand-in, no model is called (records say model "simulated")'
            )
        self.log("caps: " + self.scheduler.caps_line())
        for name, run in self.runs.items():
            todo = run.target_n - run.done_in_target
            state = "already complete" if run.state() == DatasetState.COMPLETE else f"{todo} to do"
            self.log(f"{name}: {run.done_in_target}/{run.target_n} done, {state}")

    def run(self) -> int:
        self._log_start()
        try:
            code = asyncio.run(self._main())
        except Exception as e:  # a real bug: keep the traceback in the log, say so in status
            import traceback

            self.log("crashed:\n" + traceback.format_exc())
            self.state, self.message = JobState.FAILED, f"runner crashed: {type(e).__name__}: {e}"
            code = EXIT_FAILED
        self.history.record(self.status_now())  # its last minute counts in the job's rate too
        if self.writer.unwritten:
            n = len(self.writer.unwritten)
            self.log(f"{n} answers still waiting for disk space are dropped: redone on resume")
        if self.state == JobState.FINISHED:
            self.notifier.send("finished", self.notify_message("finished"))
        elif self.state == JobState.FAILED:
            self.notifier.send("failed", self.notify_message(f"failed: {self.message}"))
        self.write_status()
        self.notifier.wait(5.0)  # a moment for the last message; a hanging command runs on alone
        return code


def main(
    paths: Paths, job_path: Path, caps: Caps, *, grace: float, force: bool, argv: list[str]
) -> int:
    echo = sys.stderr.isatty()
    try:
        lock_fd = acquire_lock(paths)
    except LockHeld as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    try:
        job = JobSpec.load(job_path)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read job spec {job_path}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    keep_caps(paths, caps)  # the job's caps are what its runner runs, by hand or managed
    kind = HiddenRunner if caps.stage == HIDDEN_STATES else Runner  # one job, two stages
    runner = kind(paths, job, caps, grace=grace, force=force, echo=echo)
    os.environ[JOB_TOKEN_ENV] = runner.token  # children inherit it, so stop can find them
    write_pidfile(paths, runner.token, argv)
    runner.write_status()  # `starting`, with this runner's pid and token
    try:
        runner.prepare()
    except BadInput as e:
        runner.state, runner.message = JobState.FAILED, str(e)
        runner.log(f"refused: {e}")
        runner.write_status()
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = runner.run()
    os.close(lock_fd)
    return code
