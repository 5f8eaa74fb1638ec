"""`python -m remote server start|smoke|stop`: the commands on the vLLM server. Each records what is
wanted (run/supervise.json) and keeps a watcher while anything is, around the mechanism in server
and smoke, which the watcher uses too. (`server check` and `server status` only look: server's.)
"""

from __future__ import annotations

from ...common.answers import ServerStarted, ServerStopped, SmokeAnswer
from ...common.jobspec import Paths
from ...common.protocol import ServerSmoke, ServerStart, ServerStop
from ..facts import intent
from ..processes.server_process import start, stop
from ..processes.smoke import smoke
from . import supervised


def smoke_command(paths: Paths, req: ServerSmoke) -> SmokeAnswer:
    return smoke(paths, req.spec.model)


def start_command(paths: Paths, req: ServerStart) -> ServerStarted:
    spec = req.spec
    with intent.locked(paths):  # the watcher acts between commands, never during one
        out = start(paths, spec)
        intent.change(
            paths, recover=supervised.recover_arg(req), server={"wanted": True, "spec": spec}
        )
    out.watcher = supervised.keep_watcher(paths)
    return out


def stop_command(paths: Paths, req: ServerStop) -> ServerStopped:
    return supervised.stop_wanted(paths, "server", lambda: stop(paths, req))
