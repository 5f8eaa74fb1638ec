"""How the host's files are written and read back: one atomic write, one tolerant codec.

A reader (tail over SSH, the watcher, a runner resuming after kill -9) must see a file whole: the
old one or the new one, never a part. So every file that is replaced rather than appended to goes
through `write_atomic`: a temp file beside it, written, fsynced, given its mode, renamed over it.

Files outlive releases: a record read back keeps the fields this release knows and leaves out the
ones a newer release added (`from_dict`); a missing field, or a null where the field takes none,
takes its default. The wire between the two sides reads through the same decoder, strictly
(wire.py): there a renamed field must fail at once. Standard library only, and nothing of this
package: every other module of remote/common may use it, and deploytool too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import types
import typing
from pathlib import Path
from typing import Iterable, Iterator


@contextlib.contextmanager
def atomic_file(path, mode: int = 0o644, sync: bool = True, text: bool = False):
    """A file to write `path` through: it replaces `path` whole when the block ends, and on an error
    (or kill -9) `path` is left as it was, with no temp file behind where Python could remove it.

    sync=False for a file rewritten every second that its writer makes again at once (status.json,
    watch.json): it is still never seen in part, and a power loss costs the last second of it,
    while an fsync under a busy disk could hold the runner's or the watcher's loop for seconds."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
            yield f
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)  # the umask narrowed what os.open asked for
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def flocked(path, mode: int = 0o644):
    """Held while the block runs: an exclusive lock on `path` (made if missing), which the kernel
    releases when its holder dies, kill -9 included."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)  # for every copy of it (a child forked meanwhile)
        os.close(fd)


def write_atomic(
    path: Path, data: bytes | str | Iterable[bytes], mode: int = 0o644, sync: bool = True
) -> None:
    """Replace `path` whole with `data` (a crash leaves the old file, at worst a temp file)."""
    with atomic_file(path, mode, sync) as f:
        if isinstance(data, str):
            f.write(data.encode())
        elif isinstance(data, bytes):
            f.write(data)
        else:
            f.writelines(data)


def write_json(path: Path, data, mode: int = 0o644, sync: bool = True) -> None:
    write_atomic(path, json.dumps(data, indent=1) + "\n", mode, sync)


def note_line(path, obj: dict) -> None:
    """One JSON line appended to a log kept for people and reports (history, restarts), in one
    write: a full disk loses the line, never the job."""
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def json_lines(path, whole: bool = False) -> Iterator[dict]:
    """Each JSON object line of a file, in order. A line that is none is left out: torn by a kill
    (or, `whole`, one without its newline yet)."""
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    obj = json.loads(raw) if raw.endswith(b"\n") or not whole else None
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    yield obj
    except OSError:  # no file, or none this process may read: no lines
        return


def read_json(path) -> dict | None:
    """A JSON object file, or None (missing, unreadable, not an object: a torn write of an older
    release, or a file another program left)."""
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (FileNotFoundError, ValueError, IsADirectoryError, PermissionError, UnicodeDecodeError):
        return None


def _decode(hint, value, strict: bool = False):
    """A value read back into the type its field says (nested records, lists and maps of them)."""
    if value is None:
        return None
    if hint in (int, float, str, bool):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if hint is float and number:
            return float(value)
        if hint is int and isinstance(value, float) and value.is_integer():
            return int(value)  # 12.0 where 12 was meant: JSON does not tell them apart
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise TypeError(f"expected {hint.__name__}, got {value!r}")
        return value
    if hint is Path:
        return Path(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) > 1 and isinstance(value, list):  # `tuple[str, ...] | str`: the sequence one
            inner = [a for a in inner if typing.get_origin(a) in (tuple, list)] or inner
        return _decode(inner[0], value, strict) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, strict)
    if origin is list and args and isinstance(value, list):
        return [_decode(args[0], v, strict) for v in value]
    if origin is tuple and isinstance(value, list):
        if not args or (len(args) == 2 and args[1] is Ellipsis):  # tuple, tuple[X, ...]
            return tuple(_decode(args[0] if args else typing.Any, v, strict) for v in value)
        if len(args) != len(value):
            raise TypeError(f"expected {len(args)} values, got {value!r}")
        return tuple(_decode(a, v, strict) for a, v in zip(args, value))  # tuple[str, int]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: _decode(args[1], v, strict) for k, v in value.items()}
    return value


def _takes_none(hint) -> bool:
    if hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


@functools.cache
def _fields_of(cls) -> tuple[dict, frozenset]:
    """(type hints, the fields __init__ takes) of a record type, worked out once a process: the
    hints are nine tenths of a read's cost, and the runner and the watcher read files every second."""
    return typing.get_type_hints(cls), frozenset(f.name for f in dataclasses.fields(cls) if f.init)


def from_dict(cls, data: dict, strict: bool = False):
    """`cls` from a dict read back from a file: unknown fields left out, missing ones defaulted (and
    a null where the field takes none: `"engine": null` is the default engine). `strict` (the
    wire, where both sides are one release): every field present and no other, else TypeError."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints, known = _fields_of(cls)
    if strict and (extra := set(data) - known, missing := known - set(data)) != (set(), set()):
        raise TypeError(
            f"{cls.__name__}: unknown fields {sorted(extra)}, missing {sorted(missing)}"
        )
    out = {}
    for k, v in data.items():
        if k in known and (v is not None or strict or _takes_none(hints[k])):
            try:
                out[k] = _decode(hints[k], v, strict)
            except TypeError as e:  # said with the field it is in: `JobStatus.pid: expected int`
                raise TypeError(f"{cls.__name__}.{k}: {e}") from None
    return cls(**out)


def plain(value, keep_none: bool = False):
    """A record as JSON, its unset (None) fields left out unless `keep_none`: a reader of an older
    release tells a field by its presence (`"caps" in request`, `"stopped_at" not in record`), not
    by its value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: plain(v, keep_none)
            for f in dataclasses.fields(value)
            if (v := getattr(value, f.name)) is not None or keep_none
        }
    if isinstance(value, (list, tuple)):
        return [plain(v, keep_none) for v in value]
    if isinstance(value, dict):
        return {k: plain(v, keep_none) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


class Codec:
    """A dataclass as JSON: `to_dict()`, and `from_dict()` tolerant of what another release wrote.
    KEEP_NONE: unset fields written as null (files whose readers look fields up by key)."""

    KEEP_NONE: typing.ClassVar[bool] = False

    @classmethod
    def from_dict(cls, data: dict):
        return from_dict(cls, data)

    def to_dict(self) -> dict:
        return plain(self, self.KEEP_NONE)


class Record(Codec):
    """A dataclass kept in a file: `read(path)` (None when there is none to read) and `write(path)`."""

    MODE: typing.ClassVar[int] = 0o644
    SYNC: typing.ClassVar[bool] = True  # False for a file rewritten every second (write_atomic)

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
        write_json(path, self.to_dict(), self.MODE, self.SYNC)
