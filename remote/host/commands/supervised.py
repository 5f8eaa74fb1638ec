"""After a command that starts or stops something: what is now wanted (run/supervise.json), and a
watcher while anything is, none once nothing is."""

from __future__ import annotations

import dataclasses
import sys

from ...common.answers import WatcherInfo
from ...common.jobspec import Paths
from ...common.protocol import CtlStart, RunArgs
from ...common.recover import RecoverSpec
from ...common.state import kept_caps
from ..facts import intent
from ..watcher import watch


def recover_arg(req) -> RecoverSpec | None:
    """--recover (hosts.yaml `recover:`); None keeps what the intent has (defaults at first)."""
    return RecoverSpec.from_dict(req.recover) if req.recover is not None else None


def want_runner(paths: Paths, req: CtlStart) -> None:
    """The runner is wanted, with the flags it had but its caps (the watcher starts it again with
    those flags and the job's kept caps, which a live re-cap or a hand-run may have changed since)."""
    flags = req.keep_caps()
    # and as a command line for a watcher an older release started: it knows no kept caps and no
    # --reset-caps, and reads its flags as the whole cap set
    old = RunArgs.exactly(kept_caps(paths), flags.grace, flags.force)
    argv = dataclasses.replace(old, reset_caps=False).argv()
    runner = {"wanted": True, "flags": flags, "argv": argv}
    intent.change(paths, recover=recover_arg(req), runner=runner)


def stop_wanted(paths: Paths, what: str, stop):
    """`ctl stop` / `server stop`: `what` is no longer wanted, said before anything is signalled (the
    watcher brings nothing back), then `stop()`; its answer gets the watcher as it is after."""
    with intent.locked(paths):
        intent.change(paths, **{what: {"wanted": False, "why": "stopped"}})
        out = stop()
    out.watcher = keep_watcher(paths)
    return out


def keep_watcher(paths: Paths) -> WatcherInfo | None:
    """A watcher while something is wanted; none once nothing is (it would exit by itself)."""
    data = intent.read(paths)
    wanted = data.server.wanted or data.runner.wanted
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
