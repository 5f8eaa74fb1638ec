"""How to reach a host: one small interface (run, start, read_range), an SSH and a local implementation.

Nothing above this package imports paramiko or fabric.
"""

from __future__ import annotations

from pathlib import Path

from ..config import Config, HostConfig
from .base import Connector, Result, shell_command
from .local import LocalConnector


def connect(host: HostConfig, config: Config | None = None) -> Connector:
    base = config.base_dir if config else Path.cwd()
    if host.is_local:
        return LocalConnector(host, base_dir=base)
    from .ssh import SSHConnector

    gateways = config.hosts if config else {}
    return SSHConnector(host, known_hosts_base=base, hosts=gateways)


__all__ = ["Connector", "Result", "connect", "shell_command"]
