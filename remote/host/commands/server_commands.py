"""`python -m remote server start|smoke|stop`: the commands on the vLLM server. Each records what is
wanted (run/supervise.json) and keeps a watcher while anything is, around the mechanism in server
and smoke, which the watcher uses too. (`server check` and `server status` only look: server's.)
"""

from __future__ import annotations

from ...common.answers import ServerStarted, ServerStopped, SmokeAnswer
from ...common.jobspec import Paths, extracts
from ...common.protocol import ServerSmoke, ServerStart, ServerStop
from ...common.state import kept_caps
from ..facts import intent
from ..processes.extraction import stage_spec
from ..processes.server_process import start, stop
from ..processes.smoke import smoke
from . import supervised


def smoke_command(paths: Paths, req: ServerSmoke) -> SmokeAnswer:
    return smoke(paths, req.spec.model)


def start_command(paths: Paths, req: ServerStart) -> ServerStarted:
    # the watcher restarts what is recorded here: a server for the stage keeps its flags
    spec = stage_spec(req.spec, req.stage or kept_caps(paths).stage, paths)
    if req.dry_run:  # what could refuse has refused by now: nothing started, nothing written
        return ServerStarted(model=spec.model, port=spec.port, argv=list(spec.args))
    if extracts(spec.args):
        paths.hidden_incoming.mkdir(parents=True, exist_ok=True)
    with intent.locked(paths):  # the watcher acts between commands, never during one
        out = start(paths, spec)
        intent.change(
            paths,
            recover=supervised.recover_arg(req),
            server={"wanted": True, "spec": spec, "base": req.spec},
        )
    out.watcher = supervised.keep_watcher(paths)
    return out


def stop_command(paths: Paths, req: ServerStop) -> ServerStopped:
    return supervised.stop_wanted(paths, "server", lambda: stop(paths, req))
