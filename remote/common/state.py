"""The files under run/ that the runner, the watcher and the commands talk through, one codec.Record
each (status.json is status.JobStatus, watch.json recover.WatchState); and the watcher's lock and
start, which the commands and the runner share."""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import procinfo
from .answers import RecoverEvent
from .caps import Caps
from .codec import Codec, Record, note_line, typed_lines
from .jobspec import JOB_TOKEN_ENV, SERVER_TOKEN_ENV, WATCH_TOKEN_ENV, Paths, ServerSpec
from .protocol import CtlRestart, RunArgs
from .records import prefix_hash
from .recover import RecoverSpec
from .status import JobState, JobStatus, JobView, RunnerInfo, SwitchView

# ------------------------------------------------------------------ the processes' records


def _same_process(pid: int, start_time: int | None) -> bool:
    """`pid` still names the process that started at `start_time` (pids are reused)."""
    return pid > 0 and procinfo.alive(pid) and procinfo.start_time(pid) == start_time


@dataclass
class ProcessRecord(Record):
    """A process we started, as its pid file records it: found again by pid *and* start time (pids
    are reused) and by the token in its environment, never by name."""

    pid: int = 0
    start_time: int | None = None
    token: str | None = None
    started_at: float = 0.0
    release: str | None = None  # the release it runs from

    def alive(self) -> bool:
        return _same_process(self.pid, self.start_time)

    @classmethod
    def live(cls, path):
        """The record if its process is still the one that wrote it, else None."""
        rec = cls.read(path)
        return rec if rec is not None and rec.alive() else None


@dataclass
class RanFrom(Codec):
    """A line of run/ran.jsonl: at `t`, a runner was ready to run (its datasets opened, their
    settings accepted) from `release` (its id)."""

    t: float = 0.0
    release: str = ""


def note_ran(paths: Paths, release: Path) -> None:
    """Say that a runner runs from `release`, unless the last line says it already (the file stays
    a few lines however often the watcher starts it again)."""
    lines = list(typed_lines(paths.ran, RanFrom))
    if not lines or lines[-1].release != release.name:
        note_line(paths.ran, RanFrom(time.time(), release.name))


@dataclass
class RunnerRecord(ProcessRecord):
    """run/runner.pid, written by the runner itself once it holds the lock."""

    pgid: int | None = None
    sid: int | None = None
    root: str | None = None
    argv: list[str] = field(default_factory=list)


@dataclass
class EngineProcess(Codec):
    """A process a server started (vLLM's engine cores rename themselves: `what` is how it showed)."""

    pid: int = 0
    start_time: int | None = None
    what: str = "?"

    def alive(self) -> bool:
        return _same_process(self.pid, self.start_time)


@dataclass
class ServerRecord(ProcessRecord):
    """run/server.pid, written by the server's start and completed as it is watched."""

    sid: int | None = None  # its session, which its engine processes keep
    port: int = 0
    model: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # masked
    headless: bool = False
    by: str = "user"  # or "watcher": the watcher's own starts count against its budget
    ready_at: float | None = None  # from then on a wedge counts (loading never does)
    stopped_at: float | None = None  # stopped by a command: not a death
    engines: list[EngineProcess] = field(default_factory=list)

    @property
    def session(self) -> int:
        return self.sid or self.pid  # pid files before `sid` was kept: a session leader


SWITCH_TAKE_S = 120.0  # a busy host may take this long to start the Python that carries a swap out


@dataclass
class StageSwitch(SwitchView, Record):
    """run/switch.json: a server swap for a restart's stage (SwitchView), with what its process
    needs to carry it out or take it up again (its owner's eyes only: the server's environment)."""

    MODE = 0o600

    request: CtlRestart = field(default_factory=CtlRestart)  # the restart, its runner's part
    runner: bool = True  # the restart's runner started at its end (a server.start: none)
    spec: ServerSpec = field(default_factory=ServerSpec)  # the server the stage gets
    base: ServerSpec = field(default_factory=ServerSpec)  # hosts.yaml's, no stage's flags added
    restart_server: bool = False  # a server up for another stage: the runner and it stop first
    serves_before: str | None = None  # the stage that server ran for (the way back to it)
    release: str | None = None  # the release the process and the runner run from
    pid: int = 0  # the process carrying it out (pid + start time, never a name)
    start_time: int | None = None
    tries: int = 0  # processes begun for it: one killed is taken up again by the watcher, once

    def carried(self) -> bool:
        """Its process still the one that took it."""
        return _same_process(self.pid, self.start_time)

    def starting(self, now: float) -> bool:
        """Begun, and its process not yet started this long: not given up on."""
        return not self.pid and now - self.step_at < SWITCH_TAKE_S

    def view(self) -> SwitchView:
        shown = {f: getattr(self, f) for f in SwitchView.__dataclass_fields__}
        return SwitchView(**shown | {"alive": self.carried() or self.starting(time.time())})


@dataclass
class WatcherRecord(ProcessRecord):
    """run/watcher.pid, written by the watcher once it holds its lock."""

    @staticmethod
    def running(paths: Paths) -> bool:
        """A watcher lives: its pid file names it, or it holds the lock (started, no record yet)."""
        return WatcherRecord.live(paths.watcher_pid) is not None or lock_held(paths.watcher_lock)


def lock_held(path: Path) -> bool:
    """Some process holds the flock on `path` (the kernel releases it when its holder dies,
    kill -9 included)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def try_lock(path: Path) -> int | None:
    """The flock on `path`, taken now and held by the returned open file; None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


# the watcher's lock, taken by whoever starts a watcher and handed to it open (its fd number here):
# there is no moment, while the new watcher's Python starts, in which nobody holds it, so nobody
# takes a starting watcher for a gone one and starts a second
WATCH_LOCK_FD_ENV = "DEPLOYTOOL_WATCHER_LOCK_FD"


def untokened_env() -> dict:
    """This process's environment without any of the tokens the host finds its processes by: a
    process started with it is stopped by none of the stops of the job, the server or the watcher
    (the watcher's own, a server swap's)."""
    tokens = (JOB_TOKEN_ENV, SERVER_TOKEN_ENV, WATCH_TOKEN_ENV)
    return {k: v for k, v in os.environ.items() if k not in tokens}


def start_watcher(paths: Paths, python: str, release: Path, token: str | None = None):
    """`python -m remote watch` for this remote_dir, detached, from `release`, holding the watcher's
    lock from before it runs; None, and nothing started, when a watcher holds it already. It
    carries neither the job's nor the server's token (stopping them must not stop it); `token`: its
    own (else it makes one)."""
    env = untokened_env()
    env.update({"PYTHONUNBUFFERED": "1", **({WATCH_TOKEN_ENV: token} if token else {})})
    argv = [python, "-m", "remote", "watch", "--root", str(paths.root)]
    paths.ensure()
    fd = try_lock(paths.watcher_lock)
    if fd is None:
        return None
    try:
        env[WATCH_LOCK_FD_ENV] = str(fd)
        with open(paths.watcher_log, "ab") as log:
            return procinfo.start_detached(argv, cwd=release, env=env, log=log, pass_fds=(fd,))
    finally:
        os.close(fd)  # the lock stays held by the watcher's copy of this open file


def take_watcher_lock(paths: Paths) -> int | None:
    """The watcher's first act: the lock its starter handed it, or (started by systemd, by hand)
    the lock taken now; None when another watcher holds it."""
    handed = os.environ.pop(WATCH_LOCK_FD_ENV, None)
    if handed and handed.isdigit():
        try:
            fcntl.flock(int(handed), fcntl.LOCK_EX | fcntl.LOCK_NB)  # held already: kept
            return int(handed)
        except OSError:  # no such open file (the variable came from elsewhere): taken as by hand
            pass
    return try_lock(paths.watcher_lock)


@dataclass
class ServerKeys(Record):
    """run/keys.json: the API key of each server the runner talks to ({base url: key}); its owner's
    eyes only."""

    MODE = 0o600

    keys: dict[str, str] = field(default_factory=dict)


@dataclass
class ImportsSeen(Record):
    """run/imports.json: each engine module this host's Python imported whole, and the file it
    loaded from ([python, path, mtime_ns, size]): a restart's check imports it anew only once that
    file changed."""

    SYNC = False  # a cache: lost, the next check imports again

    modules: dict[str, list] = field(default_factory=dict)


@dataclass
class LineIds(Record):
    """run/line-ids/<DS>.json: the prompt file whose records name their prompts by line number (it
    has no `id`s), as the last runner started on it. A file these bytes do not begin (rewritten,
    not only appended to) would make those ids name other prompts: no runner starts on it."""

    size: int = 0
    sha256: str = ""

    @classmethod
    def of(cls, path: Path) -> LineIds:
        size = path.stat().st_size
        return cls(size, prefix_hash(path, size, whole=True) or "")

    def begin(self, path: Path) -> bool:
        """The first `size` bytes of the file at `path` are these."""
        if not path.exists():
            return True  # gone: the runner says it is missing
        return prefix_hash(path, self.size, whole=True) == self.sha256


def line_ids_moved(paths: Paths, name: str, prompts: Path) -> bool:
    """Dataset `name` has records named by line number that the file at `prompts` no longer
    begins with (its prompts moved under them). Ids given to its prompts since change nothing:
    they may be the very names the old records have (`B3-000000`), for other prompts now."""
    out = paths.output(name)
    kept = LineIds.read(paths.line_ids / f"{name}.json")
    has_records = out.exists() and out.stat().st_size > 0
    return bool(kept and has_records and not kept.begin(prompts))


def moved_text(names: list[str], where: list[str], how: str = "started on") -> str:
    """Why prompt files with line-number ids that were rewritten (not only appended to) are not
    used (`how`: started on, reloaded live, deployed), and the ways out."""
    files = ", ".join(f"{n}: {w}" for n, w in zip(names, where))
    outs = ", ".join(f"data/outputs/{n}.jsonl" for n in names)
    was, its = ("was", "its") if len(names) == 1 else ("were", "their")
    return (
        f"{files} {was} rewritten or cut, not only appended to, and {its} prompts have no `id`: "
        "the line-number ids of the records already written could now name other prompts (past "
        f"a cut, the prompts added there later), so it is not {how} "
        "and nothing changed. Put the file back as it was (new prompts at its end only), or move "
        f"{outs} aside and make the dataset again from the new file (ids given to its prompts "
        "now do not help: the old records' names are line numbers; a file with an `id` on every "
        "prompt from its first run on may be reordered freely)"
    )


# ------------------------------------------------------------------ asking the running runner


@dataclass
class ControlRequest(Record):
    """run/control.json: one request to the running runner (`restart`'s live re-cap, `stop`'s
    grace, `stop --drain`), numbered: status.json's `control_seq` says it was taken."""

    seq: int = 0
    token: str | None = None  # the runner it is meant for (None: whichever runs)
    recap: bool = False  # run/caps.json changed: read it again (a live re-cap)
    drain: bool = False  # no new requests; finish those in flight
    grace: float | None = None  # seconds in-flight work gets when a stop comes


# ------------------------------------------------------------------ what the job runs


def kept_caps(paths: Paths) -> Caps:
    """The job's caps as the host keeps them (none kept: every prompt of every dataset); written
    only through host/facts/intent.keep_caps."""
    return Caps.read(paths.caps) or Caps()


def job_now(paths: Paths) -> JobView:
    """The job as every view shows it: status.json with its runner looked up, and a runner gone
    without writing its verdict (killed with -9) said stopped, never running."""
    rec = RunnerRecord.live(paths.pidfile)  # first: a runner writes its verdict, then exits
    st = JobView(**vars(JobStatus.read(paths.status) or JobStatus())).gone_unless(rec is not None)
    st.runner = RunnerInfo(
        alive=rec is not None,
        pid=rec.pid if rec else None,
        release=rec.release if rec else None,
        uptime_s=(time.time() - rec.started_at) if rec else None,
    )
    return st


def settle(paths: Paths, state: str, why: str, *, runner: int | None = None) -> bool:
    """The one writer of status.json besides the runner, which writes its own while it lives: a
    verdict said once it is gone, each only over the state it may follow, and never over the status
    of a runner that lives (one a restart started meanwhile: the job is its).
    - `stopped`: a stop had to kill `runner`; over that runner's status while it says running.
    - `failed`: the watcher gave up; over anything but a finished job, whose verdict stays (a
      server given up on after the job finished fails nothing). A finished stage that another was
      to follow stays said finished: what failed is the next one.
    - `finished`: the stage asked to follow a finished one was not started, and `why`.
    Returns whether it wrote."""
    st = JobStatus.read(paths.status)
    live = RunnerRecord.live(paths.pidfile)
    if st is not None and live is not None and st.pid == live.pid:
        return False
    nxt = st.follows if st is not None and st.state == JobState.FINISHED else None
    if state == JobState.STOPPED:
        if st is None or st.pid != runner or st.state not in (JobState.STARTING, JobState.RUNNING):
            return False
        st.end(state, why, time.time())
    elif state == JobState.FAILED:
        st = st or JobStatus()
        if st.state == JobState.FINISHED and not nxt:
            return False
        if nxt:
            why = f"the {st.stage} stage finished; the {nxt} stage was not started: {why}"
        st.end(state, why, time.time())
    elif state == JobState.FINISHED and nxt:
        st.caps = dict(st.caps, baseline=False)
        st.message = "; ".join(
            filter(None, [st.message, f"the {nxt} stage was not started: {why}"])
        )
    else:
        return False
    st.write(paths.status)
    return True


# ------------------------------------------------------------------ what should run


@dataclass
class Wanted(Codec):
    """One process's part of run/supervise.json: whether it should run, and why it changed."""

    wanted: bool = False
    why: str | None = None
    changed_at: float | None = None


@dataclass
class ServerWanted(Wanted):
    spec: ServerSpec = field(default_factory=ServerSpec)  # what `server start` ran: the watcher's
    # hosts.yaml's `server:` as given, no stage's flags added: a stage that follows is made from it
    base: ServerSpec | None = None


@dataclass
class RunnerWanted(Wanted):
    # the runner's own flags (grace, force), never caps: the watcher starts it with them, and it
    # runs the job's kept caps
    flags: RunArgs = field(default_factory=RunArgs)


@dataclass
class Supervise(Record):
    """run/supervise.json: what should be running, said by the commands, obeyed by the watcher (its
    owner's eyes only: it holds the server's environment, HF_TOKEN)."""

    MODE = 0o600

    recover: RecoverSpec | None = None  # hosts.yaml `recover:` as the last command gave it
    server: ServerWanted = field(default_factory=ServerWanted)
    runner: RunnerWanted = field(default_factory=RunnerWanted)

    @property
    def recover_spec(self) -> RecoverSpec:
        return self.recover or RecoverSpec()

    def part(self, what: str) -> Wanted:
        return {"server": self.server, "runner": self.runner}[what]

    def watched(self, what: str) -> bool:
        """Wanted, and the watcher is to keep it."""
        return self.part(what).wanted and self.recover_spec.watches(what)


def record_event(
    paths: Paths, what: str, event: str, why: str | None, log: list[str] | None = None
) -> None:
    """A line of run/recover.jsonl: a death seen, a restart, a give-up (the watcher's of the server
    and the runner, the runner's of the watcher), what `report` lists."""
    note_line(paths.recover_log, RecoverEvent(time.time(), what, event, why, log))
