"""How the host's files are written and read back: one atomic write, one tolerant codec.

A reader (tail, the watcher, a runner resuming after kill -9) must see a file whole, old or new, so
every file that is replaced rather than appended to goes through `write_atomic`. Files outlive
releases: a record read back leaves out fields a newer release added, and a missing one (or a null
where the field takes none) takes its default. The wire reads through the same decoder, strictly
(wire.py). Standard library only, and nothing of this package.
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
    """A file that replaces `path` whole when the block ends; on an error (or kill -9) `path` is left
    as it was, with no temp file behind where Python could remove it.

    sync=False for a file rewritten every second (status.json, watch.json): still never seen in
    part, a power loss costs its last second, while an fsync under a busy disk could hold the
    runner's or the watcher's loop."""
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


def sweep_temps(folder) -> int:
    """Remove the temp files `atomic_file` left in `folder` where its process died before it could
    (kill -9, or a thread cut off as its program exited on a Ctrl-C): those of a pid that no longer
    runs. How many went."""
    gone = 0
    for p in Path(folder).glob(".*.tmp") if Path(folder).is_dir() else ():
        pid = p.name[: -len(".tmp")].rsplit(".", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or another's, reused): its file is no business of ours
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        with contextlib.suppress(OSError):
            p.unlink()
            gone += 1
    return gone


@contextlib.contextmanager
def flocked(path, mode: int = 0o644):
    """An exclusive lock on `path` (made if missing) while the block runs; the kernel releases it
    when its holder dies, kill -9 included."""
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
    if isinstance(data, str):
        data = data.encode()
    with atomic_file(path, mode, sync) as f:
        f.writelines([data] if isinstance(data, bytes) else data)


def write_json(path: Path, data, mode: int = 0o644, sync: bool = True) -> None:
    write_atomic(path, json.dumps(data, indent=1) + "\n", mode, sync)


def json_line(obj) -> bytes:
    """A record (or a dict) as one compact UTF-8 JSON line, its unset fields left out."""
    return (json.dumps(plain(obj), ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def note_line(path, obj) -> None:
    """One JSON line appended to a log kept for reports (see append_line)."""
    append_line(path, json_line(obj))


def append_line(path, line: bytes) -> None:
    """One line appended in one write (a writer beside it never splits it): a full disk loses the
    line, never the job."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def json_lines(path, whole: bool = False) -> Iterator[dict]:
    """Each JSON object line of a file, in order; a line torn by a kill (or, `whole`, one without
    its newline yet) is left out."""
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


def typed_lines(path, cls, whole: bool = False) -> Iterator:
    """Each line of a JSON-lines file read back as `cls`; a torn or foreign line is left out."""
    for obj in json_lines(path, whole):
        try:
            yield from_dict(cls, obj)
        except TypeError:
            continue


def read_json(path) -> dict | None:
    """A JSON object file, or None (missing, unreadable, torn, or not an object)."""
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (FileNotFoundError, ValueError, IsADirectoryError, PermissionError, UnicodeDecodeError):
        return None


def _scalar(hint, value):
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is float and number:
        return float(value)
    if hint is int and isinstance(value, float) and value.is_integer():
        return int(value)  # 12.0 where 12 was meant: JSON does not tell them apart
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise TypeError(f"expected {hint.__name__}, got {value!r}")
    return value


def _as_is(value):
    return value


@functools.cache
def _decoder(hint, strict: bool) -> typing.Callable:
    """The function that reads a value (never None) back as `hint`, worked out once a type: a file
    of 40,000 lines is 40,000 calls of it, not 40,000 walks of the type."""
    if hint in (int, float, str, bool):
        return functools.partial(_scalar, hint)
    if hint is Path:
        return Path
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _decoder(inner[0], strict)
        seq = [a for a in inner if typing.get_origin(a) in (tuple, list)]
        if len(seq) != 1:
            return _as_is
        as_seq = _decoder(seq[0], strict)  # `tuple[str, ...] | str`: a list is the sequence one
        return lambda v: as_seq(v) if isinstance(v, list) else v
    if dataclasses.is_dataclass(hint):
        return lambda v: from_dict(hint, v, strict)
    if origin is list and args:
        item = _decoder(args[0], strict)
        return lambda v: [None if x is None else item(x) for x in v] if isinstance(v, list) else v
    if origin is tuple:
        return _tuple_decoder(args, strict)
    if origin is dict and len(args) == 2:
        val = _decoder(args[1], strict)
        return lambda v: (
            {k: None if x is None else val(x) for k, x in v.items()} if isinstance(v, dict) else v
        )
    return _as_is


def _tuple_decoder(args: tuple, strict: bool) -> typing.Callable:
    if not args or (len(args) == 2 and args[1] is Ellipsis):  # tuple, tuple[X, ...]
        item = _decoder(args[0], strict) if args else _as_is
        return lambda v: (
            tuple(None if x is None else item(x) for x in v) if isinstance(v, list) else v
        )
    each = [_decoder(a, strict) for a in args]

    def decode(v):
        if not isinstance(v, list):
            return v
        if len(args) != len(v):
            raise TypeError(f"expected {len(args)} values, got {v!r}")
        return tuple(None if x is None else d(x) for d, x in zip(each, v))  # tuple[str, int]

    return decode


def _takes_none(hint) -> bool:
    if hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


@functools.cache
def _fields_of(cls, strict: bool) -> tuple[dict[str, typing.Callable], frozenset]:
    """A record type's init fields with their decoders, and those that take None: once a process."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    decoders = {n: _decoder(hints[n], strict) for n in names}
    return decoders, frozenset(n for n in names if _takes_none(hints[n]))


def from_dict(cls, data: dict, strict: bool = False):
    """`cls` from a dict read back from a file: unknown fields left out, missing ones (or a null
    where the field takes none) defaulted. `strict` (the wire): every field present and no other,
    else TypeError."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    decoders, nullable = _fields_of(cls, strict)
    if strict and set(data) != decoders.keys():
        extra, missing = sorted(set(data) - decoders.keys()), sorted(decoders.keys() - set(data))
        raise TypeError(f"{cls.__name__}: unknown fields {extra}, missing {missing}")
    out = {}
    for k, v in data.items():
        decode = decoders.get(k)
        if decode is None:
            continue
        if v is None:
            if strict or k in nullable:
                out[k] = None
            continue
        try:
            out[k] = decode(v)
        except TypeError as e:  # said with the field it is in: `JobStatus.pid: expected int`
            raise TypeError(f"{cls.__name__}.{k}: {e}") from None
    return cls(**out)


def plain(value, keep_none: bool = False):
    """A record as JSON, its None fields left out unless `keep_none`: a reader of an older release
    tells a field by its presence, not by its value."""
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
    """A dataclass as JSON, read back tolerant of another release. KEEP_NONE: None fields written
    as null (for readers that look keys up)."""

    KEEP_NONE: typing.ClassVar[bool] = False

    @classmethod
    def from_dict(cls, data: dict):
        return from_dict(cls, data)

    def to_dict(self) -> dict:
        return plain(self, self.KEEP_NONE)

    def line(self) -> bytes:
        return json_line(self.to_dict())


class Record(Codec):
    """A dataclass kept in a file: `read(path)` (None when there is none) and `write(path)`."""

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
