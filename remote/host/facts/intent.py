"""What should be running, said by the commands, obeyed by the watcher: run/supervise.json (whether
the server and the runner are wanted, and what it takes to start them again) and run/caps.json (the
caps the runner runs).

`stop` says "not wanted" *before* it signals anything, and both sides hold run/supervise.lock while
they read-modify-write or act on it: once `stop` has said its word, nothing it stops comes back. The
record (state.Supervise) is its owner's only: it holds the server's environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from ...common.caps import Caps
from ...common.codec import flocked
from ...common.jobspec import Paths
from ...common.recover import RecoverSpec
from ...common.state import Supervise, lock_held


def read(paths: Paths) -> Supervise:
    return Supervise.read(paths.supervise) or Supervise()


RESTARTING = "restarting"  # the runner's `why` while a restart holds the job


@contextlib.contextmanager
def locked(paths: Paths):
    """Held while deciding and acting on the intent (the watcher's tick, a command's change; a
    restart, from its stop to its start)."""
    paths.ensure()
    with flocked(_lock(paths), 0o600):
        yield


def _lock(paths: Paths):
    return paths.run / "supervise.lock"


def busy(paths: Paths) -> bool:
    """A command (or the watcher's tick) holds the intent now: another waits for it."""
    return lock_held(_lock(paths))


def restarting(paths: Paths, data: Supervise) -> bool:
    """A restart holds the job between its stop and its start: it said so and holds the lock (a
    restart killed midway has let go of it)."""
    r = data.runner
    return not r.wanted and r.why == RESTARTING and lock_held(_lock(paths))


def change(
    paths: Paths,
    *,
    recover: RecoverSpec | None = None,
    server: dict | None = None,
    runner: dict | None = None,
) -> Supervise:
    """Change what is wanted (`server=dict(wanted=False, why="stopped")`), holding `locked`."""
    data = read(paths)
    if recover is not None:
        data.recover = recover
    now = time.time()
    if server is not None:
        data.server = dataclasses.replace(data.server, **server, changed_at=now)
    if runner is not None:
        data.runner = dataclasses.replace(data.runner, **runner, changed_at=now)
    data.write(paths.supervise)
    return data


def keep_caps(paths: Paths, caps: Caps) -> None:
    """The job's caps from now on (run/caps.json, replaced whole): their one writer, called by the
    commands that start the runner with a change the user named, and by the watcher to start the
    stage the user asked to follow (`--baseline`); the runner only reads them (state.kept_caps)."""
    paths.ensure()
    caps.write(paths.caps)
