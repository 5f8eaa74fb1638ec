"""`python -m remote ctl start|restart|stop|files`: the commands on the runner. Each records what
is wanted (run/supervise.json) and keeps a watcher while anything is, around the mechanism in
runner_process, which the watcher uses too. (`ctl status` is jobstate.job_status: it only looks.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal

from ...common import procinfo
from ...common.answers import KeysStored, RestartAnswer, StopAnswer
from ...common.jobspec import Paths, deployed_spec
from ...common.protocol import CtlKeys, CtlRestart, CtlStart, CtlStop, CtlSwitch
from ...common.stages import stage_of
from ...common.state import ImportsSeen, ServerKeys, try_lock
from ...common.status import SwitchStep
from ...common.wire import ExitCode, Fault, HostFault
from ..facts import intent
from ..preflight import engine_problem, model_message, model_problem
from ..processes import stage_switch
from ..processes.runner_process import (
    restart,
    start,
    stop,
    stop_over_drain,
    stopped_over_drain,
)
from . import supervised
from .jobstate import deployed_job


def preflight(paths: Paths) -> None:
    """Refuse a start or restart, before anything is stopped, when this Python cannot run the engine
    or a server does not serve the job's model (every request would be a 404)."""
    job = deployed_spec()
    if job is None:
        return  # no readable job spec: the runner says so itself, with its log lines
    engine, kind = job.engine, job.engine.kind
    known = ImportsSeen.read(paths.imports_seen) or ImportsSeen()
    problem, seen = engine_problem(kind, known=known.modules)
    if problem:
        mods = ", ".join(problem["missing"])
        raise HostFault(
            "preflight",
            f"{problem['python']} cannot import {mods}, which the {kind} engine needs; nothing was "
            "stopped",
            problem=problem,
        )
    if seen and seen != {m: known.modules.get(m) for m in seen}:
        paths.run.mkdir(parents=True, exist_ok=True)
        ImportsSeen({**known.modules, **seen}).write(paths.imports_seen)
    wrong = model_problem(engine.to_dict(), engine.urls(), dict(os.environ))
    if wrong:
        raise HostFault("model", f"nothing was stopped: {model_message(wrong)}", model=wrong)


def start_command(paths: Paths, req: CtlStart) -> RestartAnswer:
    preflight(paths)
    with intent.locked(paths):  # the watcher acts between commands, never during one
        stage_switch.refuse_during(paths, "start")
        out = start(paths, req)
        supervised.want_runner(paths, req)
    out.watcher = supervised.keep_watcher(paths)
    return out


def restart_command(paths: Paths, req: CtlRestart) -> RestartAnswer:
    """A restart, answered at once where it needs the job's server started (again) for its stage:
    the host then carries the rest out alone (`switch_command`), and the laptop follows it."""
    preflight(paths)
    stage_switch.refuse_during(paths, "restart", req.dry_run)
    sw = stage_switch.needed(paths, req)
    unless = lambda: stage_switch.refuse_during(paths, "restart", req.dry_run)  # noqa: E731
    if sw is None:
        return _restart(paths, req, unless)
    # what the new runner would refuse, refused before anything is stopped; its caps said first
    out = _restart(paths, dataclasses.replace(req, dry_run=True))
    if out.mode in ("live", "unchanged"):  # the runner keeps running: nothing of it to swap
        return _restart(paths, req, unless)
    out.switch = sw.view()
    if not req.dry_run:
        with intent.locked(paths):  # one swap at a time: the watcher's (a baseline) or this one
            stage_switch.refuse_during(paths, "restart")
            out.switch = stage_switch.begin(paths, sw, by="user").view()
        out.mode, out.dry_run = "switching", False
    return out


def _restart(paths: Paths, req: CtlRestart, unless=lambda: None) -> RestartAnswer:
    """The runner's part of a restart. `unless()`: raises where it must not start after all (a
    stop typed while the swap before it loaded the model), checked while the intent is held. A
    dry run changes nothing and holds nothing: it answers at once while another command (a drain
    of many minutes) holds the job."""
    with contextlib.nullcontext() if req.dry_run else intent.locked(paths):
        unless()
        # before the runner is stopped: a start that fails leaves nothing for the watcher to bring back
        out = restart(
            paths,
            req,
            stopping=lambda: intent.change(
                paths, runner={"wanted": False, "why": intent.RESTARTING}
            ),
        )
        if not req.dry_run:  # where nothing changes, only hosts.yaml's `recover:` may be new
            keep = supervised.keep_recover if out.mode == "unchanged" else supervised.want_runner
            keep(paths, req)
    if not req.dry_run:
        out.watcher = supervised.keep_watcher(paths)
    out.deployed_job = deployed_job(paths)  # what ran: the laptop says where hosts.yaml differs
    return out


def switch_command(paths: Paths, req: CtlSwitch, argv) -> int:
    """The detached process that carries out the swap run/switch.json holds: the server for the
    stage, then the runner as the restart asked. Its own session: no SSH session's end, no Ctrl-C
    and no laptop reaches it."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    paths.ensure()
    if try_lock(paths.switch_lock) is None:
        print("another process carries the swap out", flush=True)
        return ExitCode.FAILED
    sw = stage_switch.current(paths)
    if sw is None:
        return ExitCode.OK
    sw.pid, sw.start_time = os.getpid(), procinfo.start_time(os.getpid())
    sw.write(paths.switch)

    def say(msg: str) -> None:
        stage_switch.say(paths, f"switch: {msg}")

    if sw.runner and not stage_of(sw.stage).asks_server:
        say(f"the {sw.stage} stage: the server {sw.why or 'is down'}: kept down while it runs")
    elif sw.runner:
        say(f"the {sw.stage} stage: {sw.why or 'the server is down'}: starting it for the stage")
    else:
        say(f"server.start: {sw.model}'s load waited for on the host")
    supervised.keep_watcher(paths)  # to take this swap up again if this process is killed
    try:
        stage_switch.server_part(paths, sw)
        supervised.keep_watcher(paths)  # the server is wanted: kept before its runner starts
        if not sw.runner:  # a server.start: the server answering is its end
            stage_switch.end(paths, sw)
            return ExitCode.OK
        job = deployed_spec()
        asks = stage_of(sw.stage).asks_server
        wrong = (
            asks
            and job
            and model_problem(job.engine.to_dict(), job.engine.urls(), dict(os.environ))
        )
        if wrong:  # every request of the runner would be a 404
            raise HostFault("model", model_message(wrong), model=wrong)
        stage_switch.move(paths, sw, SwitchStep.STARTING_RUNNER)
        out = _restart(paths, sw.request, lambda: stage_switch.check_cancelled(paths, sw))
    except Exception as e:  # noqa: BLE001 - a bug too ends the swap, said, never half done
        fault = e.fault if isinstance(e, HostFault) else Fault("bug", f"{type(e).__name__}: {e}")
        say(f"the {sw.stage} stage not started: {fault.message}")
        stage_switch.given_up(paths, sw, fault)
        stage_switch.end(paths, sw, fault=fault)
        return ExitCode.OK if isinstance(e, HostFault) else ExitCode.FAILED
    say(f"runner pid {out.pid} started for the {sw.stage} stage")
    stage_switch.end(paths, sw, answer=out)
    return ExitCode.OK


def stop_command(paths: Paths, req: CtlStop) -> StopAnswer:
    # a stop begun is seen through: Ctrl-C on the user's side (its process group, locally) or a
    # dropped SSH session must not leave the runner half stopped
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    over = stop_over_drain(paths, req)  # before waiting for the command that drains
    out = supervised.stop_wanted(paths, "runner", lambda: stop(paths, req))
    if over is not None:
        out = stopped_over_drain(paths, over, out)
    sw = stage_switch.current(paths)
    if sw is not None and sw.runner:  # it sees the stop at its next look: no runner starts
        ended = f"the server swap for the {sw.stage} stage ends (it was at: {sw.step})"
        if sw.step == SwitchStep.LOADING:
            ended += "; its server goes on loading: `invoke server.stop` stops it"
        out.found = f"{out.found}; {ended}" if out.found else ended
    return out


def keys_command(paths: Paths, req: CtlKeys) -> KeysStored:
    """The keys come with the request on stdin, so no process list shows them; the file is the
    owner's only."""
    if not all(isinstance(v, str) for v in req.keys.values()):
        raise HostFault("usage", "ctl keys: expected {url: key}")
    paths.ensure()
    ServerKeys({str(u).rstrip("/"): k for u, k in req.keys.items()}).write(paths.server_keys)
    return KeysStored(servers=len(req.keys))
