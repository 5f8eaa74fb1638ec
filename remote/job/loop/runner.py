"""The runner: the one process of the job, whichever stage it is in. Its lifecycle is here once: the
lock and the pid file, signals and the grace period, control requests (a live re-cap, a drain, a
stop's grace), status.json, the watcher kept alive, the verdict and the exit code. The work is its
stage's, which plugs in through `Stage` (generate.py: an answer for every prompt; hidden_stage.py:
the target's hidden states of every answer kept; train_stage.py: a draft trained on them;
draft_stage.py: a draft measured on held-out prompts); a new stage is a module of its own and one
entry of the stage table (remote/common/stages.py).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import platform
import signal
import sys
import time
import traceback
from pathlib import Path

from ...common.caps import Caps
from ...common.jobspec import JOB_TOKEN_ENV, JobSpec, Paths, release_dir
from ...common.notify import Notifier
from ...common.protocol import GRACE_S
from ...common.stages import stage_of
from ...common.state import ServerKeys, kept_caps, note_ran
from ...common.status import JobState, JobStatus
from ...common.wire import ExitCode
from ..engine.kinds import make_engine
from ..observe.alerts import AlertWatcher
from ..observe.status_builder import stalled
from ..observe.watcher_guard import WatcherGuard
from ..store.datasets import BadInput
from .control_requests import ControlWatcher, Every, StopState
from .own_process import LockHeld, Log, acquire_lock, write_pidfile
from .stage import Stage


def stage_work(name: str) -> type:
    """The class that does stage `name`'s work (its entry in the stage table names it)."""
    module, cls = stage_of(name).work.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


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
        self.model_name = job.model_name
        self.state, self.message = JobState.STARTING, ""
        self.started_at = time.time()
        self.token = os.environ.get(JOB_TOKEN_ENV) or os.urandom(8).hex()
        self.abandoned = 0  # in-flight work cut off by a stop (redone on resume)
        self.before: JobStatus | None = None  # status.json as the runner before left it
        self.stop = StopState()  # the stage reads the same one
        self.notifier = Notifier(job.notify, paths.root, self.log)
        self.control = ControlWatcher(paths, self.token)
        self.watcher_guard = WatcherGuard(
            paths,
            self.log,
            lambda event, what: self.notifier.send(event, self.notify_message(what)),
        )
        self.alerts = AlertWatcher(
            self.notifier, self.log, job.engine.down_deadline, self.notify_message
        )
        self.stage: Stage = stage_work(caps.stage)(self, caps, force)

    def open_engine(self):
        """The job's engine, with the API key of each of its servers (kept on the host by restart)."""
        keys = ServerKeys.read(self.paths.server_keys)
        return make_engine(self.job, keys.keys if keys else None)

    # ------------------------------------------------------------------ while it runs

    def check_control(self) -> None:
        req = self.control.poll()
        if req is None:
            return
        seq = self.control.seq
        if req.grace is not None:  # `stop --grace S` says how long in-flight work gets
            self.grace = max(0.0, float(req.grace))
            self.stop.tell()
        if req.drain:
            self.stop.drain()
            n = self.stage.in_flight()
            self.log(f"control {seq}: drain: no new requests; finishing {n} in flight")
        if req.recap:  # the job's caps changed: read them again
            try:
                self.stage.recap(kept_caps(self.paths))
                self.control.error = None
                self.log(f"control {seq}: caps now {self.stage.caps_line()}")
            except (BadInput, OSError, ValueError, TypeError, KeyError) as e:
                self.control.error = str(e)
                self.log(f"control {seq}: refused: {e}")
        self.write_status()  # the caller waits for control_seq: answer now, not at the next tick

    async def _housekeeping(self) -> None:
        status = Every(1.0)
        while True:
            self.check_control()  # a stat() every 0.25 s: a re-cap lands fast
            self.stage.tick()
            if status.due():
                now = time.time()
                self.write_status()
                self.watcher_guard.check(now)
                st = self.stage
                self.alerts.check_stall(self.stalled(now), st.stall_line(now - st.progress_at()))
                if st.pool is not None:
                    self.alerts.check_engine(now, st.pool, st.engine_fault())
            if self.stage.pool is not None:  # a server the watcher started again: asked at once
                self.stage.watch_view.reprobe(time.time(), self.stage.pool, self.log)
            await asyncio.sleep(0.25)

    # ------------------------------------------------------------------ what it reports

    def notify_message(self, what: str) -> str:
        """One line: where, what happened, and how far the work is."""
        return f"{platform.node()}:{self.paths.root}: {what}; {self.stage.progress_line()}"

    def stalled(self, now: float) -> bool:
        """Work is out and its stage has finished nothing for as long as it may stay silent."""
        st = self.stage
        return stalled(self.state, st.requests_out(), st.progress_at(), now, st.stall_after())

    def status_now(self) -> JobStatus:
        now = time.time()
        return JobStatus(
            state=self.state,
            message=self.message,
            pid=os.getpid(),
            token=self.token,
            started_at=self.started_at,
            updated_at=now,
            release=str(release_dir()),
            root=str(self.paths.root),
            caps=self.stage.caps.to_dict(),
            not_run=[n for n in self.job.dataset_names() if not self.stage.caps.selected(n)],
            control_seq=self.control.seq,
            control_error=self.control.error,
            draining=self.stop.draining,
            stopping=self.grace if self.stop.stopping else None,
            signalled=self.stop.foreign,
            abandoned=self.abandoned,
            notified=list(self.notifier.sent),
            watcher_restarts=self.watcher_guard.restarts,
            stalled=self.stalled(now),
            **self.stage.status(now),
        )

    def write_status(self, st: JobStatus | None = None) -> None:
        st = st or self.status_now()
        if st.terminal:  # its verdict: nothing in flight or on its way any more
            st.end(st.state, st.message)
        try:
            st.write(self.paths.status)  # every second
        except OSError as e:
            self.log(f"cannot write {self.paths.status.name}: {e}")

    def refused(self, why: str, before: JobStatus | None) -> None:
        """A start refused by its checks changes nothing of the job: status.json is put back as the
        last runner left it (`before`), said refused in the log (and to whoever started it); a job
        that never ran says failed, and why."""
        self.log(f"refused: {why}")
        if before is not None:
            self.write_status(before)
            return
        self.state, self.message = JobState.FAILED, why
        self.write_status()

    # ------------------------------------------------------------------ lifecycle

    def _on_signal(self, signame: str, stop_event: asyncio.Event) -> None:
        self.check_control()  # a stop writes its grace period there just before the signal
        if self.stop.stop(signame):
            self.log(f"{signame} again: stopping now")
            self.grace = 0
        self.stage.stopping()
        stop_event.set()
        n = self.stage.in_flight()
        self.log(f"{signame}: no new requests; {n} in flight get {self.grace:g}s to finish")

    async def _until_done_or_stopped(self, work: asyncio.Future, stop_event: asyncio.Event) -> None:
        stopper = asyncio.ensure_future(stop_event.wait())
        await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if work.done():
            return
        # stopping: the stage starts nothing more; what is in flight gets the grace period
        deadline = time.monotonic() + self.grace
        while not work.done() and time.monotonic() < deadline and self.grace > 0:
            await asyncio.wait({work}, timeout=0.2)
        if not work.done():
            work.cancel()
            self.abandoned = await self.stage.abandon()
            await asyncio.gather(work, return_exceptions=True)
            self.log(
                f"grace period over: {self.abandoned} in-flight requests abandoned (they are "
                "redone on resume)"
            )

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig.name, stop_event)
        house = asyncio.ensure_future(self._housekeeping())
        try:
            if self.stage.fatal is None:  # a fault known before any request: no engine opened
                async with self.stage.session() as work:
                    self.state = JobState.RUNNING
                    self.stage.started()
                    self.write_status()
                    task = asyncio.ensure_future(work)
                    await self._until_done_or_stopped(task, stop_event)
                    if task.done() and not task.cancelled() and task.exception():
                        raise task.exception()
        finally:
            house.cancel()
        return self._verdict()

    def _verdict(self) -> int:
        if self.stage.fatal:
            self.state, self.message = JobState.FAILED, self.stage.fatal
            self.log(f"failed: {self.stage.fatal}")
            return ExitCode.FAILED
        if self.stop.asked:
            self.state, self.message = JobState.STOPPED, self.stop.verdict()
            self.log(f"stopped: {self.stage.summary()}")
            return ExitCode.OK
        self.state, self.message = JobState.FINISHED, self.stage.finished()
        self.log(
            f"finished: {self.stage.summary()}" + (f"; {self.message}" if self.message else "")
        )
        return ExitCode.OK

    def run(self) -> int:
        eng, caps = self.job.engine, self.stage.caps
        stage = f" stage {label}" if (label := stage_of(caps.stage).label) else ""
        self.log(
            f"runner start pid {os.getpid()} release {release_dir()}{stage} engine "
            f"{eng.kind} ({self.model_name}) concurrency {eng.concurrency}"
        )
        for line in self.stage.start_lines():
            self.log(line)
        try:
            code = asyncio.run(self._main())
        except Exception as e:  # a real bug: keep the traceback in the log, say so in status
            self.log("crashed:\n" + traceback.format_exc())
            self.state, self.message = JobState.FAILED, f"runner crashed: {type(e).__name__}: {e}"
            code = ExitCode.FAILED
        self.stage.ended()
        if self.state == JobState.FINISHED:
            follows = caps.follows()  # not the end yet: the watcher starts the next stage
            what = f"{caps.stage} finished; the {follows} follows" if follows else "finished"
            self.notifier.send("finished", self.notify_message(what))
        elif self.state == JobState.FAILED:
            self.notifier.send("failed", self.notify_message(f"failed: {self.message}"))
        self.write_status()
        self.notifier.wait(5.0)  # a moment for the last message; a hanging command runs on alone
        return code


def main(paths: Paths, job_path: Path, *, grace: float, force: bool, argv: list[str]) -> int:
    echo = sys.stderr.isatty()
    try:
        lock_fd = acquire_lock(paths)
    except LockHeld as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.FAILED
    try:
        job = JobSpec.load(job_path)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read job spec {job_path}: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    caps = kept_caps(paths)  # what the command that started it kept
    runner = Runner(paths, job, caps, grace=grace, force=force, echo=echo)
    os.environ[JOB_TOKEN_ENV] = runner.token  # children inherit it, so stop can find them
    write_pidfile(paths, runner.token, argv)
    before = runner.before = JobStatus.read(paths.status)
    runner.write_status()  # `starting`, with this runner's pid and token
    try:
        runner.stage.prepare()
    except BadInput as e:
        runner.refused(str(e), before)
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    note_ran(paths, release_dir())  # past its checks: a release that ran, for rollback
    code = runner.run()
    os.close(lock_fd)
    return code
