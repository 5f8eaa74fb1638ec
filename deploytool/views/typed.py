"""Commands named in hints, said as this user types them here.

The host's words name a command as `invoke CMD` (`invoke restart` brings the watcher back). Typed
bare, that acts on the default host of ./hosts.yaml; when this run read another hosts.yaml, or is
about another host, the hint says so: `DEPLOYTOOL_CONFIG=/x/hosts.yaml invoke restart --host cpu`.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

_COMMAND = re.compile(r"`invoke ([^`]*)`")


@dataclass(frozen=True)
class Typed:
    config: str | None = None  # the hosts.yaml read, when it is not ./hosts.yaml
    default_host: str | None = None
    binary: str = "invoke"  # or `deploytool`, the console script (its own --config flag)

    def say(self, text: str, host: str | None = None) -> str:
        def one(m: re.Match) -> str:
            words = m.group(1)
            if host and host != self.default_host and "--host" not in words.split():
                words += f" --host {host}"
            if self.config is None:
                return f"`{self.binary} {words}`"
            if self.binary == "deploytool":
                return f"`deploytool --config {shlex.quote(self.config)} {words}`"
            return f"`DEPLOYTOOL_CONFIG={shlex.quote(self.config)} invoke {words}`"

        return _COMMAND.sub(one, text)


def _binary() -> str:
    argv0 = Path(sys.argv[0] if sys.argv else "")
    if argv0.name == "deploytool" or (
        argv0.name == "__main__.py" and argv0.parent.name == "deploytool"
    ):
        return "deploytool"
    return "invoke"


_current = Typed()


def use(config_path: Path, default_host: str, found: Path | None = None) -> None:
    """Called once the command has read its hosts.yaml; `found`: the one the same command typed
    here with nothing set would read (the project's)."""
    global _current
    same = found is not None and Path(config_path).resolve() == Path(found).resolve()
    other = None if same else str(config_path)
    _current = Typed(other, default_host, _binary())


def say(text: str, host: str | None = None) -> str:
    return _current.say(text, host)
