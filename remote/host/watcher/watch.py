"""The watcher: `python -m remote watch`, one per remote_dir, detached, needing no SSH session.

Started by `ctl start/restart`, `server start` and a server swap's process (`ctl switch`) when
something is wanted or a swap is under way, and `recover:` allows it; it exits by itself once
nothing is wanted (after `stop` and `server.stop`, or a finished job). Found like the runner
(run/watcher.pid: pid + start time + token), never by name. Killing it never touches the job:
`ctl status` then says the job is unsupervised, and `restart` brings it back.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

from ...common import procinfo
from ...common.codec import write_json
from ...common.jobspec import JOB_FILE, WATCH_TOKEN_ENV, JobSpec, Paths, release_dir
from ...common.notify import Notifier
from ...common.protocol import CtlRestart
from ...common.recover import WatchState, watcher_alive
from ...common.stages import stage_of
from ...common.state import (
    RunnerRecord,
    StageSwitch,
    WatcherRecord,
    kept_caps,
    lock_held,
    settle,
    start_watcher,
    take_watcher_lock,
)
from ...common.status import JobState, ProcessState, Supervision, SwitchStep
from ...common.wire import ExitCode, Fault, HostFault
from ..facts import boot, intent, kill

TICK_S = 0.5
HEARTBEAT_S = 1.0
# the longest a tick may legitimately take (a smoke test of 5 min, the GPU memory to free, a runner
# started again coming up): past it the heartbeat stops and the watcher reads as wedged
LONGEST_TICK_S = 600.0
START_CEILING_S = 120.0


def managed(paths: Paths) -> WatcherRecord | None:
    return WatcherRecord.live(paths.watcher_pid)


def ensure(paths: Paths, python: str = sys.executable) -> WatcherRecord | None:
    """Start the watcher unless one is alive (or nothing is to be watched); returns its record."""
    rec = managed(paths)
    data = intent.read(paths)
    if rec or not data.recover_spec.enabled:
        return rec
    from ..processes import stage_switch  # a swap under way is watched too (taken up if killed)

    watched = any(data.watched(w) for w in ("server", "runner"))
    if not watched and stage_switch.current(paths) is None:
        return None
    proc = start_watcher(paths, python, release_dir(), secrets.token_hex(12))

    def settled() -> bool:  # its record written, or it (or the one starting before it) gone
        if managed(paths):
            return True
        return proc.poll() is not None if proc else not lock_held(paths.watcher_lock)

    # a watcher's start is a Python start, which a busy machine can stretch to many seconds
    deadline = time.monotonic() + START_CEILING_S
    while time.monotonic() < deadline and not settled():
        time.sleep(0.02)
    return managed(paths)


def stop(paths: Paths) -> bool:
    """Stop the watcher (a stop of everything it watches); True when one was running."""
    rec = managed(paths)
    if not rec:
        return False
    kill.terminate({rec.pid: rec.start_time}, 5.0, WATCH_TOKEN_ENV, rec.token)
    return True


BROUGHT_BACK = "`invoke restart` brings it back"


def supervision(paths: Paths) -> Supervision:
    """What status shows: is the job supervised, is a recovery under way, what happened before."""
    data = intent.read(paths)
    spec = data.recover_spec
    wanted = [w for w in ("server", "runner") if data.watched(w)]
    rec = managed(paths)
    ws = WatchState.read(paths.watch_state) or WatchState()
    now = time.time()
    # its process, and the life it shows: watch.json rewritten (every second even inside a long
    # tick), or its start, recently
    shown = max(ws.updated_at or 0.0, rec.started_at or 0.0) if rec else None
    sup = ws.view(now, live=watcher_alive(None if shown is None else now - shown))
    sup.enabled = bool(wanted)
    sup.restarting = intent.restarting(paths, data)
    if wanted and not rec:
        if RunnerRecord.live(paths.pidfile):
            sup.note = (
                "unsupervised: the watcher is gone; the runner starts it again within seconds"
            )
        else:  # both killed: nothing on the host brings either back
            sup.note = (
                "unsupervised: the watcher is not running (nor the runner, which would start it "
                f"again); {BROUGHT_BACK}"
            )
    elif rec and not ws.on_boot:
        # the setting that would spare that restart is named, and whether it can work here
        note, systemd = "a reboot needs `invoke restart`", boot.systemd_running()
        if spec.on_boot and not systemd:
            sup.note = f"{note} ({boot.NO_SYSTEMD})"
        elif spec.on_boot:
            unit = "its systemd unit is not in place yet: `invoke restart` installs it"
            sup.note = f"{note} (recover.on_boot is set, but {unit})"
        elif not systemd:
            unit = "which would bring the job back by itself, needs systemd"
            sup.note = f"{note} (recover.on_boot, {unit}, which this host does not run)"
        else:
            unit = "(then `invoke restart` once) a systemd unit brings the job back by itself"
            sup.note = f"{note}; with recover.on_boot: true in hosts.yaml {unit}"
    return sup


class Watcher:
    def __init__(self, paths: Paths):
        from .keepers import RunnerKeeper, ServerKeeper

        self.paths = paths
        self.spec = intent.read(paths).recover_spec
        self.state = WatchState(pid=os.getpid())
        self.server = ServerKeeper(paths, self.spec, self.tell, self.log)
        self.runner = RunnerKeeper(paths, self.spec, self.tell, self.log)
        self.notifier = self._notifier()
        self.stopping = False
        self.tick_started = time.time()
        self.written: dict = {}  # watch.json as the loop last wrote it (the heartbeat's copy)
        self.writing = threading.Lock()  # the loop and the heartbeat write one file (one temp name)

    def log(self, msg: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}", flush=True)

    def _notifier(self) -> Notifier:
        try:
            cfg = JobSpec.load(self.paths.root / "current" / JOB_FILE).notify
        except (OSError, ValueError, KeyError):
            cfg = {}
        return Notifier(cfg, self.paths.root, self.log)

    def tell(self, event: str, what: str) -> None:
        import platform

        self.notifier.send(event, f"{platform.node()}:{self.paths.root}: {what}")

    def tick(self, now: float) -> bool:
        """One look at everything; False when nothing is left to watch."""
        with intent.locked(self.paths):
            data = intent.read(self.paths)
            self._settings(data.recover_spec)
            if not self.spec.enabled:
                return False  # `recover: false` since: a restart said so
            from ..processes import stage_switch  # the watcher's loop only: status never pays

            sw = stage_switch.current(self.paths)
            if sw is not None:
                self._switching(now, sw)
                self.write_state(now, sw)
                return True
            if self.server.swapping:
                self._swapped()
            alive = False
            for keeper in (self.server, self.runner):
                if data.watched(keeper.what):
                    keeper.recount(data.part(keeper.what))
                    keeper.anew(data.part(keeper.what))
                    keeper.tick(now, data.part(keeper.what))
                    data = intent.read(self.paths)  # a keeper may have changed it (a give-up)
                    alive |= (
                        keeper.seen.state != ProcessState.FATAL and data.part(keeper.what).wanted
                    )
                elif keeper.seen.state != ProcessState.FATAL:
                    keeper.seen.move(ProcessState.IDLE)
            if self.runner.due_stage:
                self._next_stage(now)
                alive |= stage_switch.current(self.paths) is not None  # begun: watched from here
            self.write_state(now)
            return alive

    def _switching(self, now: float, sw) -> None:
        """A server swap under way is a command's (the host carries it out in a process of its
        own): nothing is kept meanwhile (its runner stopped, its server stopped and loading are no
        deaths, and its start spends none of the budget). One whose process was killed is taken up
        again, once; then it is given up, said in the status."""
        from ..processes import stage_switch

        if self.server.seen.state != ProcessState.FATAL and not self.server.swapping:
            self.server.seen.move(ProcessState.STARTING, why=f"started for the {sw.stage} stage")
            self.server.clock, self.server.swapping, self.server.started_at = None, True, now
        self.runner.due_stage = None
        if sw.carried() or lock_held(self.paths.switch_lock):
            return
        if sw.starting(now):
            return  # its process is starting
        if sw.tries >= stage_switch.TRIES:
            fault = Fault("start_failed", f"its process was killed {sw.tries} times, at: {sw.step}")
            self.log(f"the server swap for the {sw.stage} stage given up: {fault.message}")
            stage_switch.given_up(self.paths, sw, fault, held=True)
            stage_switch.end(self.paths, sw, fault=fault)
            return
        self.log(f"the server swap for the {sw.stage} stage: its process is gone; taken up again")
        stage_switch.begin(self.paths, sw, sw.by, Path(sw.release) if sw.release else None)

    def _swapped(self) -> None:
        """The swap ended: its server (ready and smoke tested by the swap's process) is watched as
        any other from here; one that failed the stage a watcher began says so as a failure."""
        from ..processes import server_process

        self.server.swapping, self.server.started_at, self.server.clock = False, None, None
        if self.server.seen.state != ProcessState.FATAL:
            up = server_process.managed(self.paths) is not None
            self.server.seen.move(ProcessState.WATCHING if up else ProcessState.IDLE, why=None)
        sw = StageSwitch.read(self.paths.switch)
        failed = sw is not None and sw.step == SwitchStep.FAILED and sw.code != "cancelled"
        if failed and sw.by == "watcher":
            self.tell("failed", f"the {sw.stage} stage was not started: {sw.error}")

    def _next_stage(self, now: float) -> None:
        """The stage asked to follow the one that finished (the baseline after the draft): its
        caps kept, then the server swap a typed restart of that stage would make (the server
        started again for it, then its runner once it answers: a runner waiting for a loading
        model would count the load in its speed), begun here and carried out by the host's own
        process. A watcher started again between two steps goes on from there; anything typed
        meanwhile (a stop, a restart) wins, and the status then says so."""
        from ..processes import runner_process, stage_switch  # the watcher's loop only

        nxt, data, caps = self.runner.due_stage, intent.read(self.paths), kept_caps(self.paths)
        base, running = data.server.base, runner_process.managed_runner(self.paths)
        why = None
        if running:
            why = "a runner was started meanwhile"
        elif not data.runner.wanted:
            why = "the job was stopped"
        elif not (data.watched("server") or self._stopped_for(caps.stage, data)):
            why = "the server is not the watcher's to start (server.stop, or recover.server off)"
        elif caps.stage != nxt and caps.follows() != nxt:
            why = "the caps were changed by a restart meanwhile"
        elif base is None:  # started by an older release: hosts.yaml's own spec is not known
            why = f"the server's spec without the draft is not known: `restart --stage {nxt}`"
        if why:
            self.log(f"the {nxt} stage not started: {why}")
            self.runner.due_stage = None
            if not running:  # a runner started meanwhile is the job's now: left as it is
                if data.runner.wanted:
                    intent.change(self.paths, runner={"wanted": False, "why": why})
                settle(self.paths, JobState.FINISHED, why)
            return
        # the chain goes on where the next stage has one of its own (train, draft, baseline)
        on = caps.baseline and stage_of(nxt).followed_by is not None
        if caps.stage != nxt:
            intent.keep_caps(self.paths, dataclasses.replace(caps, stage=nxt, baseline=on))
            self.log(f"the {caps.stage} stage finished: the {nxt} stage next, its server first")
        own = data.runner.flags
        req = CtlRestart(grace=own.grace, force=own.force, stage=nxt, server=base, baseline=on)
        try:
            sw = stage_switch.needed(self.paths, req)
        except HostFault as e:  # the stage's server cannot be made (its draft's folder gone)
            self.runner.due_stage = None
            why = f"{e.fault.message}: {e.fault.fix}" if e.fault.fix else e.fault.message
            self.log(f"the {nxt} stage not started: {why}")
            intent.change(self.paths, runner={"wanted": False, "why": why})
            settle(self.paths, JobState.FAILED, why)
            return
        if sw is None:  # the server serves the stage as it runs (the user's own flags)
            self.runner.start_next(now, data.runner)
            return
        self.runner.due_stage = None
        try:
            stage_switch.begin(self.paths, sw, by="watcher", rel=self.runner.release())
        except HostFault as e:  # its process never started (ended as such): the stage not started
            self.log(f"the {nxt} stage not started: {e.fault.message}")
            stage_switch.given_up(self.paths, sw, e.fault, held=True)
            self.tell("failed", f"the {nxt} stage was not started: {e.fault.message}")

    @staticmethod
    def _stopped_for(stage: str, data) -> bool:
        """The server was stopped by the swap to `stage`, a stage that runs with none (the train
        stage): the next stage's is the watcher's to start, where `recover.server` lets it."""
        from ..processes.stage_switch import switching_to

        server = data.server
        asks = stage_of(stage).asks_server
        mine = not server.wanted and server.why == switching_to(stage)
        return not asks and mine and data.recover_spec.watches("server")

    def _settings(self, spec) -> None:
        """The latest `recover:` (a restart may change it); the restarts counted so far stay."""
        if spec != self.spec:
            self.log(f"recover settings now {spec}")
            self.spec = spec
            for keeper in (self.server, self.runner):
                keeper.spec = keeper.budget.spec = spec
                keeper.seen.of = spec.max_restarts

    def write_state(self, now: float, sw=None) -> None:
        s = self.state
        s.updated_at, s.server, s.runner = now, self.server.seen, self.runner.seen
        s.server_ready_seq = self.server.ready_seq
        swapped = sw.stage if sw is not None and sw.by == "watcher" else None
        s.ticked_at, s.next_stage = now, self.runner.due_stage or self.runner.pending or swapped
        with self.writing:  # twice a second; a copy the heartbeat may write again
            self.written = s.to_dict()
            write_json(self.paths.watch_state, self.written, s.MODE, s.SYNC)

    def heartbeat(self) -> None:
        """While one tick waits long (a runner coming up, a smoke test), `beat` each second: status
        and tail see a watcher at work, not a stopped one (a wedged loop stays seen: `beat` stops
        past LONGEST_TICK_S)."""
        while not self.stopping:
            time.sleep(HEARTBEAT_S)
            self.beat(time.time())

    def beat(self, now: float) -> bool:
        """One heartbeat: watch.json again with `now`, if the loop has been quiet a second and its
        tick is not past LONGEST_TICK_S. Whether it wrote."""
        with self.writing:
            last = self.written
            quiet = now - (last.get("updated_at") or 0) if last else 0.0
            if quiet < HEARTBEAT_S or now - self.tick_started >= LONGEST_TICK_S:
                return False
            self.written = dict(last, updated_at=now)
            write_json(self.paths.watch_state, self.written, WatchState.MODE, WatchState.SYNC)
            return True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        self.state.on_boot = boot.installed(self.paths) if self.spec.on_boot else False
        self.log(f"watcher start pid {os.getpid()}: {self.spec}")
        threading.Thread(target=self.heartbeat, daemon=True).start()
        while not self.stopping:
            try:
                self.tick_started = time.time()
                if not self.tick(self.tick_started):
                    self.log("nothing left to watch: exiting")
                    break
            except Exception:  # a bug must not end supervision silently: log it and go on
                import traceback

                self.log("watcher error:\n" + traceback.format_exc())
            time.sleep(TICK_S)
        self.notifier.wait(5.0)
        return ExitCode.OK


def main(root: Path) -> int:
    paths = Paths(root)
    paths.ensure()
    if take_watcher_lock(paths) is None:
        print("another watcher is running for this remote_dir", file=sys.stderr)
        return ExitCode.FAILED
    pid = os.getpid()
    os.environ.setdefault(WATCH_TOKEN_ENV, secrets.token_hex(12))  # started by systemd: none given
    WatcherRecord(
        pid=pid,
        start_time=procinfo.start_time(pid),
        token=os.environ.get(WATCH_TOKEN_ENV),
        started_at=time.time(),
        release=str(release_dir()),
    ).write(paths.watcher_pid)
    code = Watcher(paths).run()
    # ended by itself (its lock still held: no other watcher wrote the file): no record of a
    # watcher, so that the runner that starts one again does not take this for a death
    paths.watcher_pid.unlink(missing_ok=True)
    return code
