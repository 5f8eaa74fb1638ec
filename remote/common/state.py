"""How the host's files are written and read back: one atomic write, one tolerant codec.

A reader (tail over SSH, the watcher, a runner resuming after kill -9) must see a file whole: the
old one or the new one, never a part. So every file that is replaced rather than appended to goes
through `write_atomic`: a temp file beside it, written, fsynced, given its mode, renamed over it.

Files outlive releases: a record read back keeps the fields this release knows and leaves out the
ones a newer release added (`from_dict`); a missing field takes its default. The wire between the
two sides is strict instead (wire.py): there a renamed field must fail at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import procinfo
from .jobspec import ServerSpec
from .recover import RecoverSpec


def write_atomic(
    path: Path, data: bytes | str | Iterable[bytes], mode: int = 0o644, sync: bool = True
) -> None:
    """Replace `path` whole with `data` (a crash leaves the old file, at worst a temp file).

    sync=False for a file rewritten every second that its writer makes again at once (status.json,
    watch.json): it is still never seen in part, and a power loss costs the last second of it,
    while an fsync under a busy disk could hold the runner's or the watcher's loop for seconds."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, str):
                f.write(data.encode())
            elif isinstance(data, bytes):
                f.write(data)
            else:
                f.writelines(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)  # the umask narrowed what os.open asked for
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: Path, data, mode: int = 0o644, sync: bool = True) -> None:
    write_atomic(path, json.dumps(data, indent=1) + "\n", mode, sync)


def read_json(path) -> dict | None:
    """A JSON object file, or None (missing, unreadable, not an object: a torn write of an older
    release, or a file another program left)."""
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (FileNotFoundError, ValueError, IsADirectoryError, PermissionError, UnicodeDecodeError):
        return None


def _decode(hint, value):
    """A value read back into the type its field says (nested records, lists and maps of them)."""
    if value is None:
        return None
    if hint in (int, float, str, bool):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if hint is float and number:
            return float(value)
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise TypeError(f"expected {hint.__name__}, got {value!r}")
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], value) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_dict(hint, value)
    if origin is list and args and isinstance(value, list):
        return [_decode(args[0], v) for v in value]
    if origin is tuple and args and isinstance(value, list):
        return tuple(_decode(args[0], v) for v in value)
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: _decode(args[1], v) for k, v in value.items()}
    return value


def from_dict(cls, data: dict):
    """`cls` from a dict read back from a file: unknown fields left out, missing ones defaulted."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{k: _decode(hints[k], v) for k, v in data.items() if k in known})


def _plain(value):
    """A record as JSON, its unset (None) fields left out: a reader of an older release tells a
    field by its presence (`"caps" in request`, `"stopped_at" not in record`), not by its value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(v)
            for f in dataclasses.fields(value)
            if (v := getattr(value, f.name)) is not None
        }
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Codec:
    """A dataclass as JSON: `to_dict()`, and `from_dict()` tolerant of what another release wrote."""

    @classmethod
    def from_dict(cls, data: dict):
        return from_dict(cls, data)

    def to_dict(self) -> dict:
        return _plain(self)


class Record(Codec):
    """A dataclass kept in a file: `read(path)` (None when there is none to read) and `write(path)`."""

    MODE = 0o644

    @classmethod
    def read(cls, path):
        data = read_json(path)
        if data is None:
            return None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError):
            return None  # a file too old or too damaged to be this record: as if there were none

    def write(self, path) -> None:
        write_json(path, self.to_dict(), self.MODE)


# ------------------------------------------------------------------ the processes' records


def _same_process(pid: int, start_time: int | None) -> bool:
    """`pid` still names the process that started at `start_time` (pids are reused)."""
    return pid > 0 and procinfo.alive(pid) and procinfo.start_time(pid) == start_time


@dataclass
class ProcessRecord(Record):
    """A process we started, as its pid file records it. Found again by pid *and* start time (pids
    are reused) and by the token in its environment, never by name."""

    pid: int = 0
    start_time: int | None = None
    token: str | None = None
    started_at: float = 0.0
    release: str | None = None  # the release it runs from

    def alive(self) -> bool:
        """Still the process that wrote the record."""
        return _same_process(self.pid, self.start_time)

    @classmethod
    def live(cls, path):
        """The record if its process is still the one that wrote it, else None."""
        rec = cls.read(path)
        return rec if rec is not None and rec.alive() else None


@dataclass
class RunnerRecord(ProcessRecord):
    """run/runner.pid, written by the runner itself once it holds the lock."""

    pgid: int | None = None
    sid: int | None = None
    root: str | None = None
    argv: list[str] = field(default_factory=list)


@dataclass
class EngineProcess(Codec):
    """A process a server started (vLLM's engine cores rename themselves: `what` is how it showed)."""

    pid: int = 0
    start_time: int | None = None
    what: str = "?"

    def alive(self) -> bool:
        return _same_process(self.pid, self.start_time)


@dataclass
class ServerRecord(ProcessRecord):
    """run/server.pid, written by the server's start and completed as it is watched."""

    sid: int | None = None  # its session, which its engine processes keep
    port: int = 0
    model: str = ""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # masked
    headless: bool = False
    by: str = "user"  # or "watcher": the watcher's own starts count against its budget
    ready_at: float | None = None  # from then on a wedge counts (loading never does)
    stopped_at: float | None = None  # stopped by a command: not a death
    engines: list[EngineProcess] = field(default_factory=list)

    @property
    def session(self) -> int:
        return self.sid or self.pid  # pid files before `sid` was kept: a session leader


@dataclass
class WatcherRecord(ProcessRecord):
    """run/watcher.pid, written by the watcher once it holds its lock."""


# ------------------------------------------------------------------ asking the running runner


@dataclass
class ControlRequest(Record):
    """run/control.json: one request to the running runner (`restart`'s live re-cap, `stop`'s
    grace, `stop --drain`), numbered: status.json's `control_seq` says it was taken."""

    seq: int = 0
    token: str | None = None  # the runner it is meant for (None: whichever runs)
    caps: dict | None = None  # Caps.to_dict(): a live re-cap
    drain: bool = False  # no new requests; finish those in flight
    grace: float | None = None  # seconds in-flight work gets when a stop comes


# ------------------------------------------------------------------ what should run


@dataclass
class Wanted(Codec):
    """One process's part of run/supervise.json: whether it should run, and why it changed."""

    wanted: bool = False
    why: str | None = None
    changed_at: float | None = None


@dataclass
class ServerWanted(Wanted):
    spec: ServerSpec = field(default_factory=ServerSpec)  # what `server start` ran: the watcher's


@dataclass
class RunnerWanted(Wanted):
    argv: list[str] = field(default_factory=list)  # the runner's flags (RunArgs.argv())


@dataclass
class Supervise(Record):
    """run/supervise.json: what should be running, said by the commands, obeyed by the watcher.
    It holds the server's environment (HF_TOKEN), so it is readable by its owner only."""

    MODE = 0o600

    recover: RecoverSpec | None = None  # hosts.yaml `recover:` as the last command gave it
    server: ServerWanted = field(default_factory=ServerWanted)
    runner: RunnerWanted = field(default_factory=RunnerWanted)

    @property
    def recover_spec(self) -> RecoverSpec:
        return self.recover or RecoverSpec()

    def part(self, what: str) -> Wanted:
        return {"server": self.server, "runner": self.runner}[what]

    def watched(self, what: str) -> bool:
        """Wanted, and the watcher is to keep it."""
        return self.part(what).wanted and self.recover_spec.watches(what)
