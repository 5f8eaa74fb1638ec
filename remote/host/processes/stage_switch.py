"""A server swap for a restart's stage, carried out whole on the host: whether a restart needs one,
its begin (run/switch.json and the detached process that carries it out: `ctl switch`), and its
server's part (the runner stopped, the server stopped and started for the stage, its model's load
waited for and its smoke test). The runner's start at its end is the restart's own (ctl). The
watcher begins the same swap for a stage that follows the one that finished, and takes up one whose
process was killed; the laptop only follows it.

Nothing here waits on an SSH session: a laptop closed or killed mid-load changes nothing of what the
host does. A stop (`ctl stop`, `server stop`) typed meanwhile ends it at its next look.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import sys
import time
from pathlib import Path

from ...common import procinfo
from ...common.codec import append_line
from ...common.jobspec import (
    WATCHER_MARK,
    Paths,
    ServerSpec,
    deployed_spec,
    extracts,
    flag_value,
    masked_args,
    release_dir,
    train_refusal,
)
from ...common.protocol import CtlRestart, CtlStop, ServerCheck, ServerStatus, ServerStop
from ...common.recover import RecoverSpec
from ...common.stages import EXTRACT, SPECULATE, stage_of
from ...common.state import SWITCH_TAKE_S, StageSwitch, kept_caps, lock_held, settle, untokened_env
from ...common.status import JobState, SwitchStep
from ...common.wire import Fault, HostFault, to_wire
from ..facts import engines, intent
from . import runner_process, server_process
from .extraction import stage_spec
from .smoke import smoke

LOOK_S = 1.0  # a loading server looked at this often (a stop typed meanwhile seen as soon)
TRIES = 2  # a swap whose process was killed is taken up again once by the watcher


def switching_to(stage: str) -> str:
    """Why a swap stopped the runner or the server: a stage with no server keeps this word on
    the server, which tells a stop of the swap's from a user's (`server.stop`)."""
    return f"switching to the {stage} stage"


def wrong_for_stage(spec: ServerSpec, stage: str | None, extracting: bool, drafting: bool):
    """Why a server running (`extracting`, `drafting`) cannot serve `stage` as it was started (None:
    it can, or no stage was asked): the hidden-states stage needs vLLM's extraction config, the
    draft stage its draft, the answers neither (a file for every answer; a draft measured in the
    training data's answers); a speculative config of the user's own in server.args is theirs."""
    if stage is None:
        return None
    need = stage_of(stage).server
    if not extracts(spec.args):
        if need == EXTRACT and not extracting:
            return f"runs without the extraction config the {stage} stage needs"
        if need != EXTRACT and extracting:
            return "runs with the hidden-states extraction config (a file for every answer)"
    if flag_value(spec.args, "--speculative-config") is None:
        if need == SPECULATE and not drafting:
            return f"runs without the draft the {stage} stage measures"
        if need != SPECULATE and drafting:
            return "runs with the draft stage's draft"
    return None


def needed(paths: Paths, req: CtlRestart) -> StageSwitch | None:
    """The swap `req` needs before its runner starts (not yet begun); None where the job's server
    is not the restart's to start (`req.server` None), or serves the stage as it runs. What could
    refuse the new server refuses here, before anything is stopped; so does a server down that
    --no-server keeps down, unless --force."""
    kept = kept_caps(paths)
    stage = req.stage or kept.stage
    if stage_of(stage).trains:  # what it cannot train, refused before anything is stopped
        caps = dataclasses.replace(kept, stage=stage)
        if refused := train_refusal(paths, deployed_spec(), caps):
            raise HostFault("usage", refused)
    base = req.server
    if base is None:
        return None
    state = server_process.server_state(paths, ServerStatus(quick=True))
    if not stage_of(stage).asks_server:  # its process holds the GPUs: the server stopped first
        wanted = intent.read(paths).server.wanted  # down, and the watcher would start it again
        if not (state.up or wanted):
            return None
        why = f"holds the GPUs the {stage} stage needs" if state.up else None
        return _switch(req, stage, base, base, why, state)
    if req.keep_server:
        if state.up or req.force:
            return None
        raise HostFault(
            "server",
            "the job's vLLM server is down and --no-server keeps it down: the runner would wait "
            "at 0 tokens; nothing was started",
            fix="`invoke server.start` first (or `invoke restart` without --no-server), or add "
            "--force to start the runner anyway",
        )
    why = wrong_for_stage(base, req.stage, state.extracts, state.drafts) if state.up else None
    if state.up and not why and not (stage_of(req.stage).server == SPECULATE and state.drafts):
        return None
    spec = stage_spec(base, stage, paths)
    if state.up and not why:  # the draft measured is hosts.yaml's: another one is started again
        if flag_value(spec.args, "--speculative-config") == state.speculative:
            return None
        why = "runs another draft than hosts.yaml's server.draft"
    server_process.refuse_unstartable(spec)  # before anything is stopped, a dry run's too
    return _switch(req, stage, spec, base, why, state)


def _switch(req: CtlRestart, stage: str, spec, base, why: str | None, state) -> StageSwitch:
    return StageSwitch(
        stage=stage,
        why=why,
        model=spec.model,
        ready_timeout=float(spec.ready_timeout),
        request=req,
        spec=spec,
        base=base,
        restart_server=why is not None,
        serves_before=state.serves if state.up else None,
    )


def current(paths: Paths) -> StageSwitch | None:
    """The swap under way: recorded and not ended."""
    sw = StageSwitch.read(paths.switch)
    return sw if sw is not None and not sw.ended else None


def refuse_during(paths: Paths, typed: str, dry_run: bool = False) -> None:
    """A start, restart or server.start (`typed`) while a swap is carried out would race it for the
    server and the runner: refused, with how to follow it or end it. A swap whose process is gone
    is ended here, the command typed since wins (the watcher would take it up over it); a dry run
    leaves it as it is."""
    sw = current(paths)
    if sw is None:
        return
    starting = sw.starting(time.time())
    if sw.carried() or starting or lock_held(paths.switch_lock):
        raise HostFault(
            "busy",
            f"the server is being started again for the {sw.stage} stage ({sw.step}, pid "
            f"{sw.pid or 'starting'}): its runner starts once the model has loaded",
            fix="`invoke tail` to follow it; `invoke stop` ends it",
        )
    if not dry_run:
        end(paths, sw, fault=Fault("replaced", f"its process was gone: `{typed}` typed since"))


def begin(paths: Paths, sw: StageSwitch, by: str, rel: Path | None = None) -> StageSwitch:
    """Record `sw` and start the process that carries it out, detached (it outlives the SSH command
    that asked, and the laptop); returns it as recorded once that process holds it."""
    rel = rel or release_dir()
    now = time.time()
    old = StageSwitch.read(paths.switch)
    if old is not None and old.ended and old.token != sw.token:
        sw.before = dataclasses.replace(old.view(), before=None).to_dict()
    if not sw.tries:  # taken up, it keeps the step it reached: what was done is not done again
        sw.step = SwitchStep.BEGUN
    sw.by, sw.release, sw.pid, sw.start_time = by, str(rel), 0, None
    sw.begun_at = sw.begun_at or now
    sw.step_at, sw.tries, sw.token = now, sw.tries + 1, sw.token or secrets.token_hex(8)
    paths.ensure()
    sw.write(paths.switch)
    env = untokened_env()
    argv = [sys.executable, "-m", "remote", "ctl", "switch", "--root", str(paths.root)]
    with open(paths.watcher_log, "ab") as log:
        proc = procinfo.start_detached(argv, cwd=rel, env=env, log=log)
    deadline = time.monotonic() + SWITCH_TAKE_S
    while time.monotonic() < deadline:
        now_sw = StageSwitch.read(paths.switch)
        if now_sw is not None and (now_sw.pid == proc.pid or now_sw.ended):
            return now_sw
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    fault = Fault(
        "start_failed",
        "the process that starts the server for the stage did not start",
        log=procinfo.tail_lines(paths.watcher_log, 20),
    )
    if proc.poll() is None:  # too slow to start: never to take the swap up after it was given up
        proc.kill()
    end(paths, sw, fault=fault)
    raise HostFault(fault.code, fault.message, log=fault.log)


def move(paths: Paths, sw: StageSwitch, step: SwitchStep, **fields) -> None:
    for k, v in fields.items():
        setattr(sw, k, v)
    sw.step, sw.step_at = step, time.time()
    sw.write(paths.switch)


def end(paths: Paths, sw: StageSwitch, answer=None, fault: Fault | None = None) -> None:
    if fault is None:
        return move(paths, sw, SwitchStep.DONE, answer=to_wire(answer))
    message = fault.message
    if sw.restart_server and sw.server_stopped and sw.serves_before and fault.code != "cancelled":
        message += (
            f"; the server that ran before is stopped: `invoke restart --stage {sw.serves_before}` "
            "starts it again"
        )
    move(paths, sw, SwitchStep.FAILED, error=message, code=fault.code, fix=fault.fix, log=fault.log)


def given_up(paths: Paths, sw: StageSwitch, fault: Fault, *, held: bool = False) -> None:
    """Before `end` of a swap that failed: a server that died loading is no longer wanted (nothing
    starts it again in a loop; one still loading is left to the user), and a stage that was to
    follow the finished one says why it was not started (a stop typed: it is over, not failed).
    `held`: the caller holds the intent's lock already (the watcher's tick)."""
    stopped = fault.code == "cancelled"
    if not stopped and sw.step == SwitchStep.LOADING and server_process.managed(paths) is None:
        with contextlib.nullcontext() if held else intent.locked(paths):
            intent.change(paths, server={"wanted": False, "why": fault.message})
    if sw.by == "watcher":
        why = fault.message.split(": ", 1)[1] if stopped else fault.message
        settle(paths, JobState.FINISHED if stopped else JobState.FAILED, why)


def say(paths: Paths, msg: str) -> None:
    """In the watcher's log (this process's output) and in runner.log, marked as the host's own."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} {msg}", flush=True)
    append_line(paths.log, f"{stamp} {WATCHER_MARK} {msg}\n".encode(errors="replace"))


def cancelled(paths: Paths, sw: StageSwitch) -> str | None:
    """A stop typed since the swap began: the job's (`ctl stop`) or the server's (`server stop`)."""
    data = intent.read(paths)
    parts = (
        (("job", data.runner), ("server", data.server)) if sw.runner else (("server", data.server),)
    )
    for what, part in parts:
        if not part.wanted and part.why == "stopped" and (part.changed_at or 0.0) > sw.begun_at:
            return f"the {what} was stopped"
    return None


def check_cancelled(paths: Paths, sw: StageSwitch) -> None:
    why = cancelled(paths, sw)
    if why:
        raise HostFault("cancelled", f"the {sw.stage} stage was not started: {why}")


def server_part(paths: Paths, sw: StageSwitch) -> None:
    """The runner stopped and the server stopped where it runs for another stage, then the
    stage's server started and waited for until it answers its smoke test. Taken up after a kill,
    each step done already is passed (a server loading for the stage is waited for, not started
    again)."""
    req = sw.request
    running = sw.runner and runner_process.managed_runner(paths) is not None
    if (sw.restart_server or running) and sw.step in (SwitchStep.BEGUN, SwitchStep.STOPPING_RUNNER):
        move(paths, sw, SwitchStep.STOPPING_RUNNER)
        with intent.locked(paths):
            check_cancelled(paths, sw)
            switching = switching_to(sw.stage)
            intent.change(paths, runner={"wanted": False, "why": switching})
        # the runner first: none of its requests goes to (or is counted by) a server made for
        # another stage, and it never ends failed for a server taken from under it
        runner_process.stop(paths, CtlStop(req.grace, req.drain, req.drain_timeout))
    serves = stage_of(sw.stage).asks_server
    ours = serves and ours_running(paths, sw.spec)
    if (sw.restart_server or not serves) and not ours:
        move(paths, sw, SwitchStep.STOPPING_SERVER)
        with intent.locked(paths):  # not the watcher's to start again, should the swap fail
            check_cancelled(paths, sw)
            intent.change(paths, server={"wanted": False, "why": switching_to(sw.stage)})
        stopped = server_process.stop(paths, ServerStop(grace=req.grace))
        sw.server_stopped = to_wire(stopped)
    if not serves:  # the stage runs with no server: its runner next
        say(paths, f"switch: server stopped for the {sw.stage} stage")
        return
    started = None if ours or not sw.runner else _start(paths, sw)  # a server.start: its own
    move(paths, sw, SwitchStep.LOADING)
    rec = server_process.managed(paths)
    t0 = rec.started_at if rec is not None and rec.started_at else time.time()
    headless = wait_ready(paths, sw, t0)
    if started is None:
        started = server_process.start(paths, sw.spec)  # up already: it says so (`already`)
        started.already = False
    started.ready_after_s, started.headless = time.time() - t0, headless
    if not headless:
        try:
            answered = smoke(paths, sw.model)
        except server_process.ServerError as e:
            raise HostFault(
                "start_failed",
                f"the server for the {sw.stage} stage failed its smoke test: {e}",
                log=procinfo.tail_lines(paths.server_log, 20),
            ) from None
        started.smoke, started.served_model = answered.answer, answered.model
    sw.server_started = to_wire(started)
    say(
        paths,
        f"switch: server started for the next stage ({sw.stage}): ready in {started.ready_after_s:.0f}s",
    )


def _start(paths: Paths, sw: StageSwitch):
    """The stage's server started, and wanted from here (the watcher keeps it with its flags)."""
    if extracts(sw.spec.args):  # where vLLM's connector writes: there before it loads
        paths.hidden_incoming.mkdir(parents=True, exist_ok=True)
    with intent.locked(paths):
        check_cancelled(paths, sw)
        started = server_process.start(paths, sw.spec, by=sw.by)
        if started.already:  # not ours (ours is waited for, not started): never taken for it
            raise HostFault(
                "busy",
                f"another server (pid {started.pid}, by {started.by}) was started meanwhile, "
                f"with flags other than the {sw.stage} stage's",
                fix="`invoke server.stop`, then the restart again",
            )
        req = sw.request
        recover = RecoverSpec.from_dict(req.recover) if req.recover is not None else None
        intent.change(
            paths, recover=recover, server={"wanted": True, "spec": sw.spec, "base": sw.base}
        )
    say(
        paths,
        f"switch: server pid {started.pid} started for the {sw.stage} stage: {sw.model} loads",
    )
    return started


def ours_running(paths: Paths, spec: ServerSpec) -> bool:
    """The managed server is alive and was started as `spec` (a swap taken up after its server was
    started: waited for, not started again)."""
    rec = server_process.managed(paths)
    return rec is not None and rec.argv == masked_args(server_process.build_argv(spec))


def wait_ready(paths: Paths, sw: StageSwitch, t0: float, clock=time.time, sleep=time.sleep) -> bool:
    """Until the server answers (False) or, a headless worker, has been alive a while (True)."""
    while True:
        c = server_process.check(paths, ServerCheck(wait_s=LOOK_S))
        check_cancelled(paths, sw)
        if c.ready and not c.headless:
            return False
        if c.ready and c.elapsed_s >= engines.SETTLED_S:
            return True
        if c.ready:  # a headless worker answers nothing: looked at again until it has settled
            sleep(LOOK_S)
        elapsed = clock() - t0
        if not c.alive:
            # this start's lines only: the log holds every start, each after its `==== ` line
            lines = procinfo.tail_lines(paths.server_log, 30)
            starts = [i for i, line in enumerate(lines) if line.startswith("==== ")]
            this = lines[starts[-1] + 1 :] if starts else lines
            why = (procinfo.why_lines(this, 1) or [""])[-1].strip()
            raise HostFault(
                "start_failed",
                f"the server died during start-up after {elapsed:.0f}s"
                + (f": {why}" if why else "")
                + " (logs/server.log)",
                log=this,
            )
        if elapsed > sw.ready_timeout:
            raise HostFault(
                "start_failed",
                f"the server is not ready after {sw.ready_timeout:g}s (server.ready_timeout); it "
                "is still running",
                fix="`invoke server.status` to watch, `invoke server.stop` to give up",
                log=c.log,
            )
        line = c.log[-1] if c.log else None
        if line != sw.log_line:  # the step's own moment kept: the load's time is counted from it
            sw.log_line = line
            sw.write(paths.switch)
