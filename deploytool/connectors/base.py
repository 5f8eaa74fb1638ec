"""The connector interface and the one place where remote command lines are quoted."""

from __future__ import annotations

import json
import shlex
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..config import HostConfig


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def last_line(self) -> str:
        """The last line of stdout: where host-side commands put their one JSON answer."""
        lines = self.out.strip().splitlines()
        return lines[-1] if lines else ""

    def answer(self):
        """The JSON answer on the last line of stdout (ValueError when there is none)."""
        return json.loads(self.last_line())

    def why(self, default: str = "no output") -> str:
        """The line that says why it failed: the last of stderr, else of stdout."""
        lines = self.err.strip().splitlines() or self.out.strip().splitlines()
        return lines[-1] if lines else default


def read_chunks(f, length: int, chunk: int):
    """Yield up to `length` bytes of an open file in chunks (both connectors' read_range)."""
    left = length
    while left > 0:
        data = f.read(min(chunk, left))
        if not data:
            break
        left -= len(data)
        yield data


def quote_path(path: str) -> str:
    """Quote a remote path, leaving a leading ~ to the remote shell (the remote home, not ours)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def shell_command(
    argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None
) -> str:
    """argv (+ cwd, env) -> one POSIX shell line. Every user value goes through shlex.quote here."""
    if not argv:
        raise ValueError("empty command")
    line = " ".join(shlex.quote(str(a)) for a in argv)
    if env:
        line = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + line
    if cwd:
        line = f"cd {quote_path(cwd)} && {line}"
    return line


class RemoteProcess(ABC):
    """A command still running on the host, for a conversation over its stdin/stdout."""

    @abstractmethod
    def write(self, data: bytes) -> None: ...

    @abstractmethod
    def close_stdin(self) -> None: ...

    @abstractmethod
    def readline(self) -> bytes: ...

    @abstractmethod
    def finish(self) -> Result:
        """Wait for the exit; the rest of stdout, all of stderr, the exit code."""


class Connector(ABC):
    """run / start / read_range on one host. `remote_dir` is the path to use in commands there."""

    host: HostConfig
    remote_dir: str
    round_trips: int = 0  # commands and file operations sent to the host so far (benchmarks)
    # host keys trusted on first use by this connection (accept-new): said out loud
    accepted: typing.Sequence[str] = ()

    @property
    def name(self) -> str:
        return self.host.name

    @abstractmethod
    def run(
        self,
        argv: list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | typing.BinaryIO | None = None,
        timeout: float | None = None,
    ) -> Result:
        """Run argv on the host (stdin: bytes or a binary file); never raises on a non-zero exit."""

    @abstractmethod
    def start(
        self, argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> RemoteProcess:
        """Start argv on the host and talk to it (one session for a whole exchange)."""

    @abstractmethod
    def read_range(self, remote_path: str, offset: int, length: int, chunk: int = 1 << 20):
        """Yield the bytes of remote_path[offset:offset+length] in chunks (for incremental pull)."""

    @abstractmethod
    def size(self, remote_path: str) -> int:
        """remote_path's length in bytes (where a log's last lines begin)."""

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def python(self, *args: str) -> list[str]:
        return [self.host.python, *args]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
