"""Append-only output files: repair a torn tail, index what is there fast, append durably."""

from __future__ import annotations

import bisect
import errno
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...common.codec import write_atomic

# Records are written with these keys first, so resume can read ids and token counts without
# parsing multi-kilobyte conversations (1M records resume in seconds). Other lines fall back to json.
_HEAD_RE = re.compile(
    rb'\n\{"id": "((?:[^"\\\n]|\\.)*)", "dataset": "[^"\n]*", "index": -?\d+, "finish_reason": "?([^,"\n]*)"?, '
    rb'"usage": \{"prompt_tokens": -?\d+, "completion_tokens": (\d+)\}'
)  # starts with a literal, so the regex engine jumps from line start to line start
_CHUNK = 32 << 20


@dataclass
class Existing:
    ids: set[str] = field(default_factory=set)
    tokens: dict[str, int] = field(default_factory=dict)  # id -> completion tokens
    finish: dict[str, str] = field(default_factory=dict)  # id -> finish_reason ("null": none)
    lines: int = 0
    duplicates: int = 0

    @classmethod
    def of(cls, ids: list[str], toks: list[int], finishes: list[str]) -> Existing:
        """From the records in file order: the first record of an id counts, as resume keeps it."""
        ex = cls(lines=len(ids))
        for rid, t, f in zip(reversed(ids), reversed(toks), reversed(finishes)):
            ex.tokens[rid], ex.finish[rid] = t, f
        ex.ids = set(ex.tokens)
        ex.duplicates = len(ids) - len(ex.ids)
        return ex


def repair_tail(path: Path, log=None) -> int:
    """Cut a torn last line (crash mid-write) back to the last complete, valid line.

    The cut bytes go to `<file>.torn` so nothing is destroyed. Returns bytes cut.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        keep = size
        # walk back over an incomplete tail and over a last line that is not valid JSON
        while keep > 0:
            start = max(0, keep - (1 << 20))
            f.seek(start)
            block = f.read(keep - start)
            if not block.endswith(b"\n"):
                nl = block.rfind(b"\n")
                if nl < 0 and start > 0:
                    keep = start  # an enormous torn line: keep scanning back
                    continue
                keep = start + nl + 1 if nl >= 0 else 0
                continue
            prev = block.rfind(b"\n", 0, len(block) - 1)
            if prev < 0 and start > 0:
                break  # last line longer than the window: trust it, it ends in a newline
            line = block[prev + 1 :]
            try:
                json.loads(line)
                break
            except ValueError:
                keep = start + prev + 1 if prev >= 0 else 0
        cut = size - keep
        if cut:
            f.seek(keep)
            torn = f.read()
            with open(str(path) + ".torn", "ab") as t:
                t.write(torn if torn.endswith(b"\n") else torn + b"\n")
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
            if log:
                log(
                    f"{path.name}: repaired a torn last line ({cut} bytes moved to {path.name}.torn)"
                )
    return cut


def _parse_line(line: bytes) -> tuple[str, int, str] | None:
    try:
        obj = json.loads(line)
        tokens = int((obj.get("usage") or {}).get("completion_tokens") or 0)
        return str(obj["id"]), tokens, str(obj.get("finish_reason") or "null")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _ids_tokens(found: list[tuple[bytes, bytes, bytes]]) -> tuple[list[str], list[int], list[str]]:
    """(raw JSON-string body, raw finish, raw int) triples -> str ids, int tokens and finish
    reasons, in C as far as possible."""
    if not found:
        return [], [], []
    raw_ids, raw_finish, raw_toks = zip(*found)
    finishes = b"\x00".join(raw_finish).decode("utf-8", "replace").split("\x00")
    joined = b"\x00".join(raw_ids)
    if b"\\" in joined:
        ids = [json.loads(b'"' + i + b'"') for i in raw_ids]
    else:
        ids = joined.decode().split("\x00")
    return ids, list(map(int, raw_toks)), finishes


def scan_range(path: Path, start: int = 0) -> tuple[list[str], list[int], list[int], list[str]]:
    """ids, completion tokens, each record's end offset and finish reasons of the records from byte
    `start` on."""
    ids: list[str] = []
    toks: list[int] = []
    ends: list[int] = []
    finishes: list[str] = []
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return ids, toks, ends, finishes
    with f:
        f.seek(start)
        pos = start  # file offset of buf[0]
        rest = b""
        while True:
            data = f.read(_CHUNK)
            buf = rest + data
            cut = buf.rfind(b"\n") + 1
            buf, rest = buf[:cut], buf[cut:]
            if buf:
                n_lines = buf.count(b"\n")
                ms = list(_HEAD_RE.finditer(b"\n" + buf))
                if len(ms) == n_lines:
                    i, t, fin = _ids_tokens([m.groups() for m in ms])
                    starts = [m.start() for m in ms]  # line k starts at buf[starts[k]]
                    ends += [pos + e for e in starts[1:]] + [pos + len(buf)]
                else:  # lines written by someone else: parse them one by one
                    i, t, fin, off = [], [], [], pos
                    for line in buf.splitlines(keepends=True):
                        off += len(line)
                        got = _parse_line(line)
                        if got:
                            i.append(got[0])
                            t.append(got[1])
                            fin.append(got[2])
                            ends.append(off)
                ids += i
                toks += t
                finishes += fin
                pos += len(buf)
            if not data:
                break
    return ids, toks, ends, finishes


# ------------------------------------------------------------------ the sidecar index

_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def index_path(path: Path) -> Path:
    return path.with_name(path.name + ".idx")


def index_line(rid: str, tokens: int, end: int, finish: str) -> bytes:
    quoted = json.dumps(rid, ensure_ascii=False) if _NEEDS_ESCAPE.search(rid) else f'"{rid}"'
    return f"{quoted}\t{tokens}\t{end}\t{_FINISH_SAFE.sub('_', finish)}\n".encode()


_FINISH_SAFE = re.compile(r"[\t\n\x00]")
_FIELDS = 4  # id, tokens, end offset, finish reason (an index of 3, an older release's: rebuilt)


def _read_index(idx: Path) -> tuple[list[str], list[int], list[int], list[str], bool]:
    """Entries of an index file, and whether the file is exactly those entries (no torn tail)."""
    try:
        data = idx.read_bytes()
    except FileNotFoundError:
        return [], [], [], [], True
    whole = data[: data.rfind(b"\n") + 1]
    n = whole.count(b"\n")
    # JSON strings hold no raw tab or newline, so splitting on both gives the fields of each line
    parts = whole.replace(b"\t", b"\n").split(b"\n")[:-1]
    try:
        if len(parts) != _FIELDS * n:
            raise ValueError("not four fields a line")
        raw_ids = parts[0::_FIELDS]
        joined = b"\x00".join(raw_ids)
        if b"\\" in joined:
            ids = [json.loads(i) for i in raw_ids]
        elif n:
            if joined.count(b'"') != 2 * n or not (
                joined.startswith(b'"') and joined.endswith(b'"')
            ):
                raise ValueError("unquoted id")
            ids = joined[1:-1].decode().split('"\x00"')
        else:
            ids = []
        toks = list(map(int, parts[1::_FIELDS]))
        ends = list(map(int, parts[2::_FIELDS]))
        finishes = b"\x00".join(parts[3::_FIELDS]).decode().split("\x00") if n else []
    except (ValueError, UnicodeDecodeError):
        return [], [], [], [], False  # not ours, or an older release's: rebuild
    return ids, toks, ends, finishes, len(whole) == len(data)


def _record_at(path: Path, start: int, end: int) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            got = _parse_line(f.read(end - start))
    except OSError:
        return None
    return got[0] if got else None


def load_existing(path: Path, log=None, update_index: bool = True) -> Existing:
    """What an output file holds, read through its sidecar index `<file>.idx` (id, tokens, end offset
    per record): a restart reads ~30 bytes per record, not the whole responses. Only records past the
    last indexed one are scanned. An index that does not match the file is rebuilt."""
    idx = index_path(path)
    size = path.stat().st_size if path.exists() else 0
    ids, toks, ends, finishes, clean = _read_index(idx)
    keep = bisect.bisect_right(ends, size)  # entries past a repaired (cut) tail go
    rewrite = not clean or keep < len(ends)
    ids, toks, ends, finishes = ids[:keep], toks[:keep], ends[:keep], finishes[:keep]
    if ends:
        prev = ends[-2] if len(ends) > 1 else 0
        last = ends[-3:]  # its last offsets rise (with one or two records: paired with itself)
        if (
            any(a >= b for a, b in zip(last, last[1:]))
            or _record_at(path, prev, ends[-1]) != ids[-1]
        ):
            if log:
                log(f"{path.name}: its index does not match it: rebuilding the index")
            ids, toks, ends, finishes, rewrite = [], [], [], [], True
    t_ids, t_toks, t_ends, t_fin = scan_range(path, ends[-1] if ends else 0)
    if update_index and (rewrite or t_ids):
        if rewrite:
            entries = zip(ids, toks, ends, finishes)
            write_atomic(idx, b"".join(index_line(*e) for e in entries))
        with open(idx, "ab") as f:
            f.write(b"".join(index_line(*e) for e in zip(t_ids, t_toks, t_ends, t_fin)))
    return Existing.of(ids + t_ids, toks + t_toks, finishes + t_fin)


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def encode_record(rec: dict) -> bytes:
    head = {k: rec[k] for k in ("id", "dataset", "index", "finish_reason", "usage")}
    head.update(rec)
    return (json.dumps(head, ensure_ascii=False) + "\n").encode()


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


class DiskFull(OSError):
    """An append found no space (or quota, or an I/O error): nothing of the line was left behind."""


def disk_usage(path: Path) -> dict:
    """free_bytes and total_bytes of the filesystem holding `path` (for the user, not root)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return {"free_bytes": None, "total_bytes": None}
    return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}


class AppendFile:
    """One complete line per write(2) with O_APPEND; fsync at most once a second (never for a file
    that need not be durable)."""

    def __init__(self, path: Path, indexed: bool = False, durable: bool = True):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # not durable: what the file holds must survive the process, not the machine (no fsync,
        # which would stall the caller's loop while the disk catches up)
        self.durable = durable
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.index = AppendFile(index_path(path)) if indexed else None
        self.dirty = False
        self.last_sync = time.monotonic()

    def size(self) -> int:
        """Where the next line begins."""
        return os.fstat(self.fd).st_size

    def append(
        self, data: bytes, rid: str | None = None, tokens: int = 0, finish: str = "null"
    ) -> None:
        """Write one whole line, or nothing: on a full disk the part written is cut back at once and
        DiskFull is raised (the caller keeps the record and tries again later)."""
        start = os.lseek(self.fd, 0, os.SEEK_END)
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as e:
            if e.errno not in DISK_ERRNOS:
                raise
            if len(view) != len(data):
                os.ftruncate(self.fd, start)  # no torn line, not even until the next start
            raise DiskFull(f"{self.path.name}: {e.strerror}") from None
        self.dirty = True
        if self.index is not None and rid is not None:
            # after the record: a crash leaves the index behind the file, never ahead of it
            try:
                self.index.append(index_line(rid, tokens, start + len(data), finish))
            except DiskFull:
                self.index = None  # lagging from here on: the next start completes it from the file
        if time.monotonic() - self.last_sync >= 1.0:
            self.sync()

    def sync(self) -> None:
        if self.dirty and self.durable:
            try:
                os.fsync(self.fd)
            except OSError as e:
                if e.errno not in DISK_ERRNOS:
                    raise
                return  # still dirty: tried again at the next sync
            self.dirty = False
        if self.index is not None:
            self.index.sync()
        self.last_sync = time.monotonic()

    def close(self) -> None:
        self.sync()
        os.close(self.fd)
        if self.index is not None:
            self.index.close()
