"""After a command that starts or stops something: what is now wanted (run/supervise.json), and a
watcher while anything is, none once nothing is."""

from __future__ import annotations

import sys

from ...common.answers import WatcherInfo
from ...common.jobspec import Paths
from ...common.protocol import CtlStart
from ...common.recover import RecoverSpec
from ..facts import intent
from ..processes import stage_switch
from ..watcher import watch


def recover_arg(req) -> RecoverSpec | None:
    """--recover (hosts.yaml `recover:`); None keeps what the intent has (defaults at first)."""
    return RecoverSpec.from_dict(req.recover) if req.recover is not None else None


def want_runner(paths: Paths, req: CtlStart) -> None:
    """The runner is wanted, with its own flags and no caps (the watcher starts it again with those
    flags, and it runs the job's kept caps, which a live re-cap may have changed since)."""
    runner = {"wanted": True, "flags": req.own_flags()}
    intent.change(paths, recover=recover_arg(req), runner=runner)


def keep_recover(paths: Paths, req: CtlStart) -> None:
    """hosts.yaml `recover:` as the command gave it, written only where it changed."""
    spec = recover_arg(req)
    if spec is not None and spec != intent.read(paths).recover:
        intent.change(paths, recover=spec)


def stop_wanted(paths: Paths, what: str, stop):
    """`ctl stop` / `server stop`: `what` is no longer wanted, said before anything is signalled (the
    watcher brings nothing back), then `stop()`; its answer gets the watcher as it is after."""
    with intent.locked(paths):
        intent.change(paths, **{what: {"wanted": False, "why": "stopped"}})
        out = stop()
    out.watcher = keep_watcher(paths)
    return out


def keep_watcher(paths: Paths) -> WatcherInfo | None:
    """A watcher while something is wanted or a server swap is under way (it takes one whose process
    was killed up again); none once nothing is (it would exit by itself)."""
    data = intent.read(paths)
    wanted = data.server.wanted or data.runner.wanted or stage_switch.current(paths) is not None
    if not wanted or not data.recover_spec.enabled:
        watch.stop(paths)
        return None
    rec = watch.ensure(paths)
    if not rec:
        return None
    if data.recover_spec.on_boot:
        from ..facts import boot

        why = boot.install(paths, sys.executable)
        return WatcherInfo(rec.pid, on_boot=why is None, note=why)
    return WatcherInfo(rec.pid)
