"""Append-only output files: repair a torn tail, index what is there fast, append durably."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

# Records are written with these keys first, so resume can read ids and token counts without
# parsing multi-kilobyte conversations (1M records resume in seconds). Other lines fall back to json.
_HEAD_RE = re.compile(
    rb'\n\{"id": "((?:[^"\\\n]|\\.)*)", "dataset": "[^"\n]*", "index": -?\d+, "finish_reason": [^,\n]*, '
    rb'"usage": \{"prompt_tokens": -?\d+, "completion_tokens": (\d+)\}'
)  # starts with a literal, so the regex engine jumps from line start to line start
_CHUNK = 32 << 20


@dataclass
class Existing:
    ids: set[str] = field(default_factory=set)
    tokens: dict[str, int] = field(default_factory=dict)  # id -> completion tokens
    lines: int = 0
    duplicates: int = 0


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
            line = block[prev + 1:]
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
                log(f"{path.name}: repaired a torn last line ({cut} bytes moved to {path.name}.torn)")
    return cut


def _parse_line(line: bytes) -> tuple[str, int] | None:
    try:
        obj = json.loads(line)
        return str(obj["id"]), int((obj.get("usage") or {}).get("completion_tokens") or 0)
    except (ValueError, KeyError, TypeError):
        return None


def scan(path: Path) -> Existing:
    """ids and completion tokens of every record in an output file (after repair_tail)."""
    ex = Existing()
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return ex
    with f:
        rest = b""
        while True:
            data = f.read(_CHUNK)
            if not data and not rest:
                break
            buf = rest + data
            if data:
                cut = buf.rfind(b"\n") + 1
                buf, rest = buf[:cut], buf[cut:]
            else:
                rest = b""
            if not buf:
                continue
            n_lines = buf.count(b"\n")
            found = _HEAD_RE.findall(b"\n" + buf)
            if len(found) == n_lines:
                # the fast path, in C as far as possible: 1M records in a few seconds
                raw_ids, raw_toks = zip(*found)
                joined = b"\x00".join(raw_ids)
                if b"\\" in joined:
                    ids = [json.loads(b'"' + i + b'"') for i in raw_ids]
                else:
                    ids = joined.decode().split("\x00")
                toks = list(map(int, raw_toks))
            else:
                pairs = [p for p in map(_parse_line, buf.splitlines()) if p]
                ids, toks = [i for i, _ in pairs], [t for _, t in pairs]
            before = len(ex.tokens)
            ex.tokens.update(zip(ids, toks))  # in C; a duplicate id (never written by us) counts once
            ex.lines += len(ids)
            ex.duplicates += len(ids) - (len(ex.tokens) - before)
    ex.ids = set(ex.tokens)
    return ex


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


class AppendFile:
    """One complete line per write(2) with O_APPEND; fsync at most once a second."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.dirty = False
        self.last_sync = time.monotonic()

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.dirty = True
        if time.monotonic() - self.last_sync >= 1.0:
            self.sync()

    def sync(self) -> None:
        if self.dirty:
            os.fsync(self.fd)
            self.dirty = False
        self.last_sync = time.monotonic()

    def close(self) -> None:
        self.sync()
        os.close(self.fd)
