"""`deploytool`: the same tasks as `invoke`, runnable from anywhere (like Fabric's `fab`)."""

from __future__ import annotations

import os

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


program = DeployToolProgram(
    name="deploytool", binary="deploytool", version=__version__, namespace=ns
)


def main() -> None:
    program.run()
