"""Finding this remote_dir's runners: the managed one by its pid file (pid + start time + token),
and those without a valid pid file (started by hand, pid file lost) by their command line *and* a
working directory or --root inside the remote_dir, never by name alone."""

from __future__ import annotations

import os
from pathlib import Path

from ...common import procinfo
from ...common.jobspec import Paths, flag_value
from ...common.state import RunnerRecord


def managed_runner(paths: Paths) -> RunnerRecord | None:
    """The pid file's runner if that process is still the one that wrote it."""
    return RunnerRecord.live(paths.pidfile)


def _looks_like_runner(argv: list[str]) -> bool:
    joined = " ".join(argv)
    if not argv or "python" not in os.path.basename(argv[0]):
        return False
    if "-m remote run" in joined or "-m remote.run_inference" in joined:
        return True
    return any(os.path.basename(a) == "run_inference.py" for a in argv[1:3])


def _root_arg(argv: list[str], cwd: str | None) -> Path | None:
    root = flag_value(argv, "--root")
    if root is None:
        return None
    p = Path(root).expanduser()
    return p if p.is_absolute() or not cwd else Path(cwd) / p


def stray_runners(paths: Paths, exclude: set[int]) -> list[int]:
    """Runners of this remote_dir without a valid pid file: same user, a runner's command line, and
    a working directory (or --root) inside it; merely mentioning run_inference is not enough."""
    me = os.getuid()
    found = []
    for pid in procinfo.all_pids():
        if pid in exclude or pid == os.getpid() or procinfo.uid(pid) != me:
            continue
        argv = procinfo.cmdline(pid)
        if not _looks_like_runner(argv):
            continue
        cwd = procinfo.cwd(pid)
        root = _root_arg(argv, cwd)
        if procinfo.under(cwd if root is None else str(root), paths.root):
            found.append(pid)
    return found
