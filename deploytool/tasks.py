"""The invoke collection: thin typed tasks that call deploytool functions and render the answer."""

from __future__ import annotations

import functools

from invoke import Collection, Exit, Task, task

from . import commands
from .errors import DeployToolError

HOST_HELP = "host name(s) from hosts.yaml, comma-separated (default: default_host)"


class HostTask(Task):
    """`--host`/`-H` for the host flag; `-h` always stays help."""

    def arg_opts(self, name, default, taken_names):
        opts = super().arg_opts(name, default, set(taken_names) | {"h", "H"})
        if name == "host":
            opts["names"] = ["host", "H"]
        return opts


def _cli(fn):
    """Expected failures -> one line on stderr and the right exit code; bugs keep their traceback."""

    @functools.wraps(fn)
    def wrapper(c, *args, **kwargs):
        try:
            code = fn(c, *args, **kwargs)
        except DeployToolError as e:
            raise Exit(f"error: {e}", int(e.code)) from None
        if code:
            raise Exit(code=int(code))

    return wrapper


@task(klass=HostTask, help={"host": HOST_HELP})
@_cli
def hosts(c, host=""):
    """List the configured hosts and check each one is reachable."""
    return commands.hosts(host or None)


@task(klass=HostTask, help={"host": HOST_HELP, "dry_run": "show what would change, change nothing"})
@_cli
def deploy(c, host="", dry_run=False):
    """Sync remote/ and the job spec to the host as a new release; switch `current` atomically."""
    return commands.deploy(host or None, dry_run=dry_run)


@task(klass=HostTask, help={"host": HOST_HELP, "to": "release id (default: the previous one)"})
@_cli
def rollback(c, host="", to=""):
    """Point `current` back to the previous release."""
    return commands.rollback(host or None, to=to or None)


ns = Collection(hosts, deploy, rollback)
