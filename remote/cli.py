"""Argument parsing for `python -m remote ...` (standard library only: it runs on the host)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common.jobspec import JOB_FILE, Paths, default_root, release_dir
from .common.runargs import add_run_args, caps_from_args


def run_command(a, argv: list[str]) -> int:
    from .job import runner

    root = (a.root or default_root()).expanduser().resolve()
    job = (a.job or release_dir() / JOB_FILE).expanduser()
    return runner.main(Paths(root), job, caps_from_args(a), grace=a.grace, force=a.force, argv=argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m remote", description="deploytool's host side")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="run the job in the foreground (same lock, outputs and status as a managed run)"
    )
    add_run_args(run)
    from .host import ctl, server

    ctl.add_parser(sub)
    server.add_parser(sub)
    w = sub.add_parser(
        "watch", help="the watcher: restarts a dead or wedged server and a dead runner"
    )
    w.add_argument("--root", type=Path, help="remote_dir (default: the one this release lives in)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    if a.command == "run":
        return run_command(a, argv)
    if a.command == "watch":
        from .host import watch

        return watch.main((a.root or default_root()).expanduser().resolve())
    if a.command == "ctl" and a.ctl_command in ("plan", "report"):
        return read_outputs(a)  # reads the job's outputs: the job's room, not process control
    return a.func(a)


def read_outputs(a) -> int:
    """`ctl plan` and `ctl report`: one JSON answer from the outputs, like every ctl answer."""
    import json

    paths = Paths((a.root or default_root()).expanduser().resolve())
    if a.ctl_command == "plan":
        from .job.plan import answer

        out = answer(paths, a.tokens_per_dataset, a.datasets)
    else:
        from .job.report import gather

        out = gather(paths)
    print(json.dumps({"ok": True, **out}))
    return 0
