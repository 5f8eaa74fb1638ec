"""`python -m remote server start|smoke|stop`: the commands on the vLLM server. Each records what is
wanted (run/supervise.json) and keeps a watcher while anything is, around the mechanism in server
and smoke, which the watcher uses too. (`server check` and `server status` only look: server's.)
"""

from __future__ import annotations

from ...common.answers import ServerStarted, ServerStopped, SmokeAnswer
from ...common.jobspec import Paths, extracts
from ...common.protocol import CtlRestart, ServerCheck, ServerSmoke, ServerStart, ServerStop
from ...common.state import StageSwitch, kept_caps
from ..facts import intent
from ..processes import server_process, stage_switch
from ..processes.extraction import stage_spec
from ..processes.server_process import check, start, stop
from ..processes.smoke import smoke
from . import supervised


def smoke_command(paths: Paths, req: ServerSmoke) -> SmokeAnswer:
    return smoke(paths, req.spec.model)


def start_command(paths: Paths, req: ServerStart) -> ServerStarted:
    """Started detached and answered at once; a load to wait for is then waited for on the host,
    by the swap's process (its smoke test included), which the laptop follows: a closed lid
    changes nothing of it."""
    # the watcher restarts what is recorded here: a server for the stage keeps its flags
    stage = req.stage or kept_caps(paths).stage
    spec = stage_spec(req.spec, stage, paths)
    if req.dry_run:  # nothing started, nothing written: what would refuse, refused
        server_process.refuse_unstartable(spec)
        return ServerStarted(model=spec.model, port=spec.port, argv=list(spec.args))
    if extracts(spec.args):
        paths.hidden_incoming.mkdir(parents=True, exist_ok=True)
    with intent.locked(paths):  # the watcher acts between commands, never during one
        cur = stage_switch.current(paths)
        if cur is not None and not cur.runner and server_process.managed(paths) is not None:
            out = start(paths, cur.spec)  # another server.start's load: who started it, waited for
            out.switch = cur.view()
            return out
        stage_switch.refuse_during(paths, "server.start")  # one swap at a time, under the lock
        out = start(paths, spec)
        intent.change(
            paths,
            recover=supervised.recover_arg(req),
            server={"wanted": True, "spec": spec, "base": req.spec},
        )
        if not (out.already and check(paths, ServerCheck()).ready):
            sw = StageSwitch(
                stage=stage,
                model=spec.model,
                ready_timeout=float(spec.ready_timeout),
                request=CtlRestart(recover=req.recover),
                spec=spec,
                base=req.spec,
                runner=False,
            )
            out.switch = stage_switch.begin(paths, sw, by="user").view()
    out.watcher = supervised.keep_watcher(paths)
    return out


def stop_command(paths: Paths, req: ServerStop) -> ServerStopped:
    return supervised.stop_wanted(paths, "server", lambda: stop(paths, req))
