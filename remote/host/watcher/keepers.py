"""What the watcher does each tick for the server and for the runner: notice a death or a wedge,
wait out the backoff, start again, and give up past the budget.

One state per process (status.ProcessState: idle, watching, backoff, starting, fatal), moved only
here and only through ProcessWatch.move, which checks where each move starts. A start is not waited
for: the server loads for minutes, so `starting` is checked tick by tick and the runner is watched
meanwhile.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Callable

from ...common import machine, metrics, procinfo
from ...common.answers import RecoverEvent
from ...common.codec import append_line, typed_lines
from ...common.jobspec import JOB_FILE, WATCHER_MARK, Paths
from ...common.protocol import GPU_WAIT_S, CtlStart, CtlStop
from ...common.recover import Budget, Observation, RecoverSpec, WedgeClock
from ...common.state import (
    RunnerRecord,
    RunnerWanted,
    ServerRecord,
    ServerWanted,
    Wanted,
    kept_caps,
    record_event,
    settle,
)
from ...common.status import JobState, JobStatus, ProcessState, ProcessWatch
from ...common.wire import HostFault
from ..facts import engines, intent, kill
from ..processes import runner_process, server_process
from ..processes.smoke import smoke

START_WAIT_S = 120.0  # a runner it starts again has this long to report running

Tell = Callable[[str, str], None]  # (notify event, what happened)


def reason_lines(path, n: int = 8) -> list[str]:
    """The lines of a log that say why it died: its errors, else its last lines (the watcher's own
    in runner.log are not its words)."""
    return procinfo.why_lines(procinfo.tail_lines(path, 200, without=WATCHER_MARK), n)


def _shape(cause: str, lines: list[str]) -> str:
    """A failure with its numbers (pids, times, ports) left out: two of the same read the same."""
    return re.sub(r"\d+", "#", " | ".join([cause, *lines[-2:]]))


class Keeper:
    """What both keepers share: the state, the budget, the death and the give-up bookkeeping."""

    what = "?"

    def __init__(self, paths: Paths, spec: RecoverSpec, tell: Tell, log: Callable[[str], None]):
        self.paths, self.spec, self.tell, self.watcher_log = paths, spec, tell, log
        self.seen = ProcessWatch(of=spec.max_restarts)  # what status shows of this process
        self.budget = Budget(spec)
        self.budget.restarts = self._restarts_so_far(paths)
        self.counted_since = intent.read(paths).part(self.what).changed_at or 0.0
        self._count_restarts()
        self.last_start_failure: str | None = None  # the last start's failure, numbers left out
        self.gave_up_at = 0.0

    def _restarts_so_far(self, paths: Paths) -> list[float]:
        """The restarts this process's budget has spent, whoever watched them: a watcher started
        again after a kill goes on with its predecessor's, never a fresh one (the window drops the
        old ones). Each death since a command last wanted it (a restart, as at first) and since the
        last give-up began one; the last death, if nothing came after it, is counted again when
        this keeper finds the process dead."""
        events = self._since_wanted(paths)
        if events and events[-1].event == "died":
            events.pop()
        return [e.at for e in events if e.event == "died"]

    def _since_wanted(self, paths: Paths) -> list[RecoverEvent]:
        """This process's events since a command last wanted it and since the last give-up."""
        since = intent.read(paths).part(self.what).changed_at or 0.0
        events = [
            e
            for e in typed_lines(paths.recover_log, RecoverEvent)
            if e.what == self.what and e.at > since
        ]
        after = max((i + 1 for i, e in enumerate(events) if e.event == "gave_up"), default=0)
        return events[after:]

    def _count_restarts(self) -> None:
        """What status says: the restarts since a command last started it, whichever watcher
        made them (one started again after a kill counts its predecessor's, and says its cause)."""
        restarts = [e for e in self._since_wanted(self.paths) if e.event == "restarted"]
        self.seen.restarts = len(restarts)
        if restarts and self.seen.last_cause is None:
            self.seen.last_cause = restarts[-1].why

    def log(self, msg: str) -> None:
        """Said in the watcher's log and in the runner's: one who reads that (or follows it with
        `tail --log`) sees why a runner ended and another began, and what became of its server."""
        self.watcher_log(msg)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        append_line(self.paths.log, f"{stamp} {WATCHER_MARK} {msg}\n".encode(errors="replace"))

    def recount(self, want: Wanted) -> None:
        """A command changed what is wanted (a restart typed, say): the restarts status says are
        counted anew from it (they read `1x … since a command last started it` after one had)."""
        if (want.changed_at or 0.0) != self.counted_since:
            self.counted_since = want.changed_at or 0.0
            self._count_restarts()

    def anew(self, want: Wanted) -> bool:
        """Given up on, then wanted again by a command (a restart typed since): watched from here
        on as at first, its restart budget whole. True when it was."""
        if self.seen.state != ProcessState.FATAL or not want.wanted:
            return False
        if (want.changed_at or 0.0) <= self.gave_up_at:
            return False
        self.seen, self.budget = ProcessWatch(of=self.spec.max_restarts), Budget(self.spec)
        self.last_start_failure = None
        self.log(f"{self.what}: wanted again since the give-up: watched anew")
        return True

    def _died(self, now: float, cause: str, lines: list[str], at_start: bool = False) -> str | None:
        """Count a death (or a start that failed: `at_start`); None to go on, else why it is given
        up: the budget is spent, or a start failed the very way the one before it did (a start
        that cannot work: trying it again only repeats the same lines)."""
        self.seen.last_cause = cause
        record_event(self.paths, self.what, "died", cause)
        shape = _shape(cause, lines) if at_start else None
        again = shape is not None and shape == self.last_start_failure
        self.last_start_failure = shape
        delay = None if again else self.budget.failed(now)
        if delay is None:
            self.seen.move(ProcessState.FATAL, why=cause, log=lines)
            self.gave_up_at = now
            record_event(self.paths, self.what, "gave_up", cause, lines)
            why = (
                f"failed to start the same way twice in a row; gave up: {cause}"
                if again
                else f"died again after {self.spec.max_restarts} restarts within "
                f"{self.spec.window:g}s; gave up: {cause}"
            )
            self.log(f"{self.what}: {why}")
            return why
        self.seen.move(
            ProcessState.BACKOFF,
            why=cause,
            attempt=self.budget.attempt(now),
            next_try_at=now + delay,
        )
        self.log(
            f"{self.what}: {cause}; restart {self.seen.attempt} of {self.spec.max_restarts} in "
            f"{delay:g}s"
        )
        return None

    def _restarted(self, now: float, extra: str = "") -> None:
        self.seen.move(ProcessState.WATCHING)
        self.last_start_failure = None  # a start that worked: the next failure is news again
        msg = (
            f"{self.what} restarted (attempt {self.seen.attempt} of {self.spec.max_restarts}) after: "
            f"{self.seen.why}{extra}"
        )
        record_event(self.paths, self.what, "restarted", self.seen.why)
        self._count_restarts()
        self.log(msg)
        self.seen.why = None
        self.tell(f"{self.what}_restarted", msg)


# ------------------------------------------------------------------ the server


def kill_session(rec: ServerRecord) -> list[int]:
    """SIGKILL everything of a dead or wedged server: its session (a SIGSTOPped engine takes no
    SIGTERM) and every process carrying its token. Returns the pids signalled."""
    tree = engines.processes(rec)
    if rec.alive():
        tree[rec.pid] = rec.start_time
    hit = [p for p, st in tree.items() if kill.signal_if_same(p, st, signal.SIGKILL, group=False)]
    kill.wait_gone(tree, 10)
    return sorted(hit)


GONE = "the server process is gone (an exit nobody asked for)"


def observe(paths: Paths, rec: ServerRecord, now: float) -> Observation:
    """One look at a ready server: its /metrics, /v1/models if that failed, the runner's view."""
    port = rec.port
    code, text = server_process.get_url(f"http://127.0.0.1:{port}/metrics", timeout=5)
    snap = metrics.snapshot(text) if code == 200 else {}
    o = Observation(
        now=now,
        generation_tokens=snap.get("generation_tokens"),
        prompt_tokens=snap.get("prompt_tokens"),
        running=snap.get("running"),
    )
    if code != 200:
        o.models_ok = server_process.served_models(port, server_process.server_key(paths))[0] == 200
    st = JobStatus.read(paths.status)
    # a runner's count, by status.json's one rule: a stale file's requests are no longer inside
    for e in st.endpoints if st is not None and st.fresh(now) else ():
        if re.search(rf"//(127\.0\.0\.1|localhost|\[::1\]):{port}(/|$)", e.url):
            o.runner_in_flight += e.in_flight
            if e.last_token_at is not None:
                o.last_token_at = max(o.last_token_at or 0.0, e.last_token_at)
    return o


class ServerKeeper(Keeper):
    what = "server"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.clock: WedgeClock | None = None
        self.clock_of: int | None = None  # the pid the clock belongs to
        self.next_look = 0.0
        self.dead_pids: set[int] = set()  # of the server that died: the GPU memory to wait for
        self.gpu_deadline = 0.0
        self.started_at: float | None = None
        self.ready_seq = 0
        # a server swap under way (the host's own process starts and waits for the server): nothing
        # of it is kept meanwhile, and it is watched anew once the swap has ended (watch._swapped)
        self.swapping = False

    @property
    def look_every(self) -> float:
        return max(0.5, min(5.0, self.spec.wedged_after / 10))

    def tick(self, now: float, want: ServerWanted) -> None:
        if want.spec.data_parallel_member:
            self.seen.move(ProcessState.IDLE, why="a data-parallel group member: restart the group")
            return
        if self.seen.state in (ProcessState.WATCHING, ProcessState.IDLE):
            self._watch(now, want)
        elif self.seen.state == ProcessState.STARTING:
            self._starting(now, want)
        # a first death is started again in the tick that saw it (no backoff to wait)
        if self.seen.state == ProcessState.BACKOFF and now >= (self.seen.next_try_at or 0):
            self._start(now, want)

    def _watch(self, now: float, want: ServerWanted) -> None:
        rec = ServerRecord.read(self.paths.server_pid)
        if rec is None or rec.pid <= 0:
            return
        alive = rec.alive()
        if not alive and not rec.ready_at and rec.by != "watcher":
            # `server.start` at the keyboard failed and said so there: not ours to retry
            self.log("server: died during a start-up the user ran; not restarted")
            intent.change(self.paths, server={"wanted": False, "why": "start-up failed"})
            self.seen.move(ProcessState.IDLE)
            return
        self.seen.move(ProcessState.WATCHING)
        if not alive:
            return self._dead(now, rec, GONE)
        if not rec.ready_at:
            # still loading (bounded by server.ready_timeout, not by these rules); its children
            # now include passing start-up helpers, so its engines are known only once it is ready
            if now < self.next_look or rec.headless:
                return
            self.next_look = now + self.look_every
            if not server_process.check(self.paths).ready:  # it records ready_at once ready
                return
            rec = ServerRecord.read(self.paths.server_pid) or rec
        rec = engines.watch(self.paths, rec)
        gone = engines.gone(rec)
        if gone:
            names = ", ".join(f"{e.what} (pid {e.pid})" for e in gone)
            return self._dead(now, rec, f"its engine processes are gone: {names}")
        if rec.headless or now < self.next_look:
            return
        self.next_look = now + self.look_every
        if self.clock is None or self.clock_of != rec.pid:
            self.clock = WedgeClock(self.spec.wedged_after, rec.ready_at)
            self.clock_of = rec.pid
        why = self.clock.observe(observe(self.paths, rec, now))
        if why:
            # a kill -9 while it was being probed is a death, not a wedge
            self._dead(now, rec, why if rec.alive() else GONE)

    def _dead(
        self,
        now: float,
        rec: ServerRecord | None,
        cause: str,
        lines: list[str] | None = None,
        at_start: bool = False,
    ) -> None:
        """`rec`: the dead server's record (None: no process was started); `at_start`: it failed
        while being started (loading, its smoke test)."""
        self.dead_pids = set() if rec is None else set(kill_session(rec)) | {rec.pid}
        self.gpu_deadline = now + GPU_WAIT_S
        self.clock = None
        lines = lines if lines is not None else reason_lines(self.paths.server_log)
        why = self._died(now, cause, lines, at_start)
        if why:
            self._give_up(why, lines)

    def _gpu_held(self) -> list[dict]:
        return [a for a in machine.compute_apps() or [] if a["pid"] in self.dead_pids]

    def _start(self, now: float, want: ServerWanted) -> None:
        if server_process.managed(self.paths):  # started meanwhile (`server.start` at the keyboard)
            self.seen.move(ProcessState.WATCHING)
            return
        held = self._gpu_held()
        if held and now < self.gpu_deadline:
            return  # vLLM's workers free GPU memory slowly: a start beside them is out of memory
        if held:
            self.log(
                f"server: GPU memory still held by {held} after {GPU_WAIT_S:g}s; starting anyway"
            )
        self.seen.attempt = self.budget.restarting(now)
        self.seen.move(ProcessState.STARTING)
        self.started_at = now
        try:
            server_process.start(self.paths, want.spec, by="watcher")
        except server_process.ServerError as e:
            self._dead(now, None, f"could not start: {e}", [str(e)], at_start=True)

    def _starting(self, now: float, want: ServerWanted) -> None:
        c = server_process.check(self.paths)
        rec = ServerRecord.read(self.paths.server_pid)
        if not c.alive:
            return self._dead(now, rec, "it died while loading", at_start=True)
        timeout = float(want.spec.ready_timeout)
        if not c.ready:
            if now - (self.started_at or now) > timeout:
                why = f"not ready after {timeout:g}s (server.ready_timeout)"
                self._dead(now, rec, why, at_start=True)
            return
        if c.headless and c.elapsed_s < engines.SETTLED_S:
            return
        if not c.headless:
            try:
                smoke(self.paths, want.spec.model)
            except server_process.ServerError as e:  # the server's log says why: its lines
                why = reason_lines(self.paths.server_log)
                return self._dead(now, rec, f"the smoke test failed: {e}", why, at_start=True)
        if rec is not None and not rec.ready_at:  # check records it, but not for a headless worker
            rec.ready_at = now
            rec.write(self.paths.server_pid)
        self.ready_seq += 1
        took = f"ready in {now - (self.started_at or now):.0f}s"
        self._restarted(now, f"; {took}")

    def _give_up(self, why: str, lines: list[str]) -> None:
        """Nothing is started again, nothing of the server stays on the GPUs, the job fails."""
        # the first line that says why (a chain's root cause: vLLM's last points up at it), the last two
        reasons = list(dict.fromkeys(lines[:1] + lines[-2:]))
        why = f"the server {why}" + (": " + " | ".join(reasons) if reasons else "")
        intent.change(
            self.paths, server={"wanted": False, "why": why}, runner={"wanted": False, "why": why}
        )
        server_process.wait_gpu_free(self.dead_pids, GPU_WAIT_S)
        runner_process.stop(self.paths, CtlStop(grace=10.0))
        settle(self.paths, JobState.FAILED, why)
        self.tell("failed", f"failed: {why}")


# ------------------------------------------------------------------ the runner


class RunnerKeeper(Keeper):
    what = "runner"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        # a stage asked to follow the one its runner finished: to start (due_stage), or once
        # the runner, its verdict written, has exited (pending)
        self.due_stage: str | None = None
        self.pending: str | None = None
        self.dead: int | None = None  # the pid whose death the backoff is for

    def tick(self, now: float, want: RunnerWanted) -> None:
        if self.seen.state in (ProcessState.WATCHING, ProcessState.IDLE):
            self._watch(now)
        if self.seen.state == ProcessState.BACKOFF and self._another_died():
            # a runner a command started during the backoff, dead too: its death counted and
            # said (the restart would have been said as after the first one's alone)
            self.seen.move(ProcessState.WATCHING)
            self._watch(now)
        # a first death is started again in the tick that saw it (no backoff to wait)
        if self.seen.state == ProcessState.BACKOFF and now >= (self.seen.next_try_at or 0):
            self._start(now, want)

    def _another_died(self) -> bool:
        rec = RunnerRecord.read(self.paths.pidfile)
        return rec is not None and rec.pid not in (self.dead, 0) and not rec.alive()

    def _watch(self, now: float) -> None:
        rec = RunnerRecord.read(self.paths.pidfile)
        if rec is None or rec.pid <= 0:
            return
        st = JobStatus.read(self.paths.status)
        verdict = st.state if st and st.pid == rec.pid else None
        # what its caps ask to follow (a watcher started again may find the next stage's kept)
        follows = st.follows if verdict == JobState.FINISHED else None
        if rec.alive():
            self.seen.move(ProcessState.WATCHING)
            self.pending = follows
            return
        self.pending = None
        if follows:  # the draft measured, the baseline asked for: the watcher starts it
            self.due_stage = follows
            return
        if verdict in (JobState.FINISHED, JobState.FAILED):
            # its own verdict: a finished job, or a fault restarting cannot mend
            intent.change(self.paths, runner={"wanted": False, "why": f"the runner {st.state}"})
            self.log(f"runner: {st.state} by itself ({st.message or 'no message'}); not restarted")
            self.seen.move(ProcessState.IDLE)
            return
        cause = (
            f"the runner (pid {rec.pid}) {st.message}"
            if verdict == JobState.STOPPED  # its own word: a signal not of deploytool's
            else f"the runner (pid {rec.pid}) died without being stopped (a signal, a crash, "
            "the OOM killer: see dmesg)"
        )
        self.dead = rec.pid
        why = self._died(now, cause, reason_lines(self.paths.log))
        if why:
            self._give_up(why)

    def _start(self, now: float, want: RunnerWanted, next_stage: bool = False) -> None:
        """Start it again after a death, or (`next_stage`) for the stage that follows."""
        if runner_process.managed_runner(self.paths):  # started meanwhile (`invoke restart`)
            self.seen.move(ProcessState.WATCHING)
            return
        if not next_stage:
            self.seen.attempt = self.budget.restarting(now)
        try:  # a start that fails is counted and said, never a crash
            req = CtlStart(**vars(want.flags.own_flags()), wait=START_WAIT_S)
            runner_process.start(self.paths, req, rel=self.release())
        except HostFault as e:
            why = self._died(now, f"could not start: {e}", e.fault.log, at_start=True)
            if why:
                self._give_up(why)
            return
        if next_stage:
            self.log(f"runner started for the {kept_caps(self.paths).stage} stage")
        else:
            self._restarted(now)

    def release(self) -> Path:
        """The release the runner ran, still there: a deploy since changes nothing until a restart
        is typed (its job.json may hold settings the records refuse: a runner brought back from it
        would fail to start, and the job would die at its first crash). `current` where none ran."""
        rec = RunnerRecord.read(self.paths.pidfile)
        ran = Path(rec.release) if rec is not None and rec.release else None
        if ran is not None and (ran / JOB_FILE).is_file():
            return ran
        return (self.paths.root / "current").resolve()

    def start_next(self, now: float, want: RunnerWanted) -> None:
        self.due_stage = None
        self._start(now, want, next_stage=True)

    def _give_up(self, why: str) -> None:
        why = f"the runner {why}"
        intent.change(self.paths, runner={"wanted": False, "why": why})
        settle(self.paths, JobState.FAILED, why)
        self.tell("failed", f"failed: {why}")
