"""The runner as a process: one per remote_dir (a lock), its pid file, its log."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ...common import procinfo
from ...common.jobspec import Paths, release_dir
from ...common.state import RunnerRecord, try_lock


class LockHeld(Exception):
    pass


class Log:
    def __init__(self, path: Path, echo: bool):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", buffering=1)
        self.echo = echo

    def __call__(self, msg: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}"
        try:
            self.f.write(line + "\n")
        except OSError:
            pass  # a full disk under logs/ must not take the job down with it
        if self.echo:
            print(line, file=sys.stderr, flush=True)


def acquire_lock(paths: Paths):
    """One runner per remote_dir: an flock held for the runner's life (released by the kernel on kill -9)."""
    paths.ensure()
    fd = try_lock(paths.lock)
    if fd is None:
        holder = RunnerRecord.read(paths.pidfile)
        raise LockHeld(
            f"another runner is already running in {paths.root} (pid {holder.pid if holder else '?'})"
        ) from None
    return fd


def write_pidfile(paths: Paths, token: str, argv: list[str]) -> None:
    pid = os.getpid()
    RunnerRecord(
        pid=pid,
        pgid=os.getpgid(0),
        sid=os.getsid(0),
        start_time=procinfo.start_time(pid),
        token=token,
        release=str(release_dir()),
        root=str(paths.root),
        argv=list(argv),
        started_at=time.time(),
    ).write(paths.pidfile)
