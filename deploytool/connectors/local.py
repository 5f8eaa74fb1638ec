"""The `local` host: the same operations on this machine, no SSH."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

from ..config import HostConfig
from ..errors import RemoteError
from .base import Connector, RemoteProcess, Result, read_chunks


class _LocalProcess(RemoteProcess):
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    def write(self, data: bytes) -> None:
        with suppress(BrokenPipeError):  # finish() reports how the command ended
            self.proc.stdin.write(data)

    def close_stdin(self) -> None:
        if self.proc.stdin is not None:
            with suppress(BrokenPipeError):
                self.proc.stdin.close()
            self.proc.stdin = None  # communicate() must not flush it again

    def readline(self) -> bytes:
        with suppress(BrokenPipeError):
            self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def finish(self) -> Result:
        self.close_stdin()
        out, err = self.proc.communicate()
        return Result(self.proc.returncode, out, err)


class LocalConnector(Connector):
    def __init__(self, host: HostConfig, base_dir: Path):
        self.host = host
        self.base_dir = Path(base_dir)
        self.remote_dir = str(self._path(host.remote_dir))

    def _path(self, p: str) -> Path:
        path = Path(os.path.expanduser(p))
        return path if path.is_absolute() else self.base_dir / path

    def run(self, argv, *, cwd=None, env=None, stdin=None, timeout=None) -> Result:
        # a real file is handed over as the child's stdin; bytes go through a pipe
        if cwd and not self._path(cwd).is_dir():
            return Result(2, b"", f"cd: can't cd to {cwd}: No such file or directory".encode())
        io_kw = (
            {"stdin": stdin}
            if hasattr(stdin, "fileno")
            else {"input": stdin if stdin is not None else b""}
        )
        try:
            proc = subprocess.run(
                [str(a) for a in argv],
                cwd=str(self._path(cwd)) if cwd else None,
                env=self._env(env),
                capture_output=True,
                timeout=timeout,
                start_new_session=True,  # as on a remote host: the user's Ctrl-C is not its
                **io_kw,
            )
        except FileNotFoundError as e:
            return Result(127, b"", f"{argv[0]}: command not found ({e.strerror})".encode())
        except NotADirectoryError as e:
            return Result(1, b"", f"cd {cwd}: {e.strerror}".encode())
        except subprocess.TimeoutExpired:
            raise RemoteError(f"`{argv[0]} …` timed out after {timeout}s") from None
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def _env(self, env):
        full_env = dict(os.environ)
        # `python3` on the local host means the interpreter deploytool runs in (its venv has the extras)
        full_env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full_env.get("PATH", "")
        full_env.update(env or {})
        return full_env

    def start(self, argv, *, cwd=None, env=None) -> RemoteProcess:
        if cwd and not self._path(cwd).is_dir():  # the shell's own answer, as over SSH
            argv, cwd = ["sh", "-c", 'cd "$1" || exit 2', "sh", str(self._path(cwd))], None
        try:
            proc = subprocess.Popen(
                [str(a) for a in argv],
                cwd=str(self._path(cwd)) if cwd else None,
                env=self._env(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            raise RemoteError(f"cannot start {argv[0]}: {e.strerror}") from None
        return _LocalProcess(proc)

    def size(self, remote_path):
        try:
            return self._path(remote_path).stat().st_size
        except OSError as e:
            raise RemoteError(f"cannot read {remote_path}: {e.strerror}") from None

    def read_range(self, remote_path, offset, length, chunk=1 << 20):
        try:
            f = open(self._path(remote_path), "rb")
        except OSError as e:
            raise RemoteError(f"cannot read {remote_path}: {e.strerror}") from None
        with f:
            f.seek(offset)
            yield from read_chunks(f, length, chunk)
