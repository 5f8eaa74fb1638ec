"""`deploytool`: the same tasks as `invoke`, runnable from anywhere (like Fabric's `fab`)."""

from __future__ import annotations

import functools
import os
import sys

from invoke import Argument, Program

from . import __version__, usage
from .collection import ns
from .config import CONFIG_ENV


class DeployToolProgram(Program):
    def core_args(self):
        # invoke's own -f/--config (an invoke config file) gives way to ours: the hosts.yaml to read
        args = [a for a in super().core_args() if "config" not in a.names]
        args.append(
            Argument(
                names=("config", "c"),
                help=f"hosts.yaml to read (default: ${CONFIG_ENV}, else the nearest hosts.yaml here or above)",
            )
        )
        return args

    def parse_tasks(self):
        usage.parse_tasks(self, super().parse_tasks)
        # read only now: `deploytool status --config X` gives it after the task, which invoke parses
        # with the task's flags (and then merges into self.args)
        path = self.args.config.value
        if path:
            os.environ[CONFIG_ENV] = os.path.abspath(path)

    def update_config(self, merge=True):
        self.config.load_shell_env()
        if merge:
            self.config.merge()


def ends_as_said(fn):
    """How a program ends outside the task: `invoke status | head -1` (the reader closed our
    stdout, having read what it wanted) ends there, exit 0, with no traceback, stdout going to
    /dev/null so nothing written later (the interpreter's last flush) meets the closed pipe
    again; a Ctrl-C says so in one line, exit 130."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()  # what is buffered meets a closed pipe here, inside the try
            return result
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0) from None
        except KeyboardInterrupt:  # outside the task (it says its own): invoke would exit 1, mute
            print(
                "interrupted (Ctrl-C) while invoke started or ended, around the command: nothing "
                "here is left half-written; run it again",
                file=sys.stderr,
            )
            raise SystemExit(130) from None

    wrapped.ends_as_said = True
    return wrapped


def end_as_said(program_class: type[Program] = Program) -> None:
    """Both programs that run our tasks: invoke itself (from tasks.py, whose import comes while
    invoke's own `run` is already under way: so what it calls after, the help and lists it prints
    and the task it executes) and ours (its `run`, the top)."""
    for name in ("parse_cleanup", "execute", "run"):
        method = getattr(program_class, name)
        if not getattr(method, "ends_as_said", False):
            setattr(program_class, name, ends_as_said(method))


program = DeployToolProgram(
    name="deploytool", binary="deploytool", version=__version__, namespace=ns
)


def main() -> None:
    end_as_said(DeployToolProgram)
    program.run()
