"""pull: copy data/outputs/ back, sending only what is new.

Output files are append-only, so a local copy is a prefix of the host's file: only bytes past the
local size are sent, after checking that the last block of the shared prefix hashes the same.
Only whole lines are appended, and a tail torn by a killed pull is cut on the next one.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from remote.common.codec import atomic_file, sweep_temps, write_json
from remote.common.protocol import CtlFiles
from remote.common.records import prefix_hash

from ..connectors import Connector
from ..errors import RemoteError
from .control import call

CAPS_FILE = ".caps.json"  # the job's caps as the host kept them at the pull (a dot: no output file)
BEYOND_FILE = ".beyond.json"  # the ids of the records beyond them, per dataset, as the host counted


@dataclass
class Pulled:
    """What pull did with one file: unchanged | fetched | appended | re-fetched | refused: ..."""

    action: str
    bytes: int = 0


@dataclass
class HiddenPulled:
    """What pull --hidden-states did (pull_hidden.py)."""

    rows: dict[str, int] = field(default_factory=dict)  # dataset -> rows here
    fetched: int = 0  # files
    bytes: int = 0
    freed: int = 0  # files deleted on the host by this pull
    freed_bytes: int = 0
    missing: list[str] = field(default_factory=list)  # rows whose file is neither here nor there
    refused: list[str] = field(default_factory=list)  # files the host kept: why


@dataclass
class PullResult:
    host: str
    dest: str
    files: dict[str, Pulled] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    hidden: HiddenPulled | None = None  # with --hidden-states

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files.values())


def _append_only(name: str) -> bool:
    return name.endswith(".jsonl") or name.endswith(".torn")


def _cut_torn_tail(path: Path) -> None:
    """A pull killed mid-append leaves a partial line: cut back to the last newline."""
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(max(0, size - (1 << 20)))
        block = f.read()
        if block.endswith(b"\n"):
            return
        nl = block.rfind(b"\n")
        keep = size - len(block) + nl + 1 if nl >= 0 else 0
        f.truncate(keep)


def fetch_whole(
    conn: Connector, remote: str, local: Path, size: int, exact: bool = False
) -> tuple[int, str]:
    """The file's first `size` bytes, written here atomically: (bytes, their sha256 as received).
    `exact`: fewer than `size` is an error, and nothing is written."""
    local.parent.mkdir(parents=True, exist_ok=True)
    h, n = hashlib.sha256(), 0
    with atomic_file(local) as f:
        for chunk in conn.read_range(remote, 0, size):
            f.write(chunk)
            h.update(chunk)
            n += len(chunk)
        if exact and n != size:
            raise RemoteError(f"{remote}: {n} bytes came, the row says {size}")
    return n, h.hexdigest()


def _append_new(conn: Connector, remote: str, local: Path, start: int, end: int) -> int:
    """Append remote[start:end] up to its last complete line. Returns bytes received."""
    received = 0
    pending = b""
    with open(local, "ab") as f:
        for chunk in conn.read_range(remote, start, end - start):
            received += len(chunk)
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                f.write(pending[:cut])
                pending = pending[cut:]
        f.flush()
        os.fsync(f.fileno())
    return received


def pull_host(conn: Connector, dest: Path, *, refetch: bool = False) -> PullResult:
    local_dir = Path(dest) / conn.name
    sweep_temps(local_dir)  # an earlier pull's, cut off by a Ctrl-C or a kill
    have = {}
    for p in local_dir.iterdir() if local_dir.is_dir() else ():
        if p.is_file() and not p.name.startswith("."):
            if _append_only(p.name):
                _cut_torn_tail(p)
            have[p.name] = p.stat().st_size
    answer = call(conn, CtlFiles(have=have, whole=refetch))  # --refetch: every byte compared
    info = answer.files
    result = PullResult(conn.name, str(local_dir))
    if info:  # made only once there is something to put in it (no empty folder after a failure)
        local_dir.mkdir(parents=True, exist_ok=True)
        if answer.caps is not None:  # which records are the job's, for export
            answer.caps.write(local_dir / CAPS_FILE)
        if answer.beyond is not None:
            write_json(local_dir / BEYOND_FILE, answer.beyond)
        else:  # a host of an older release: an earlier pull's ids are not this one's
            (local_dir / BEYOND_FILE).unlink(missing_ok=True)
    remote_dir = f"{conn.remote_dir.rstrip('/')}/data/outputs"
    sync(conn, info, have, remote_dir, local_dir, refetch, result)
    return result


def sync(conn, info: dict, have: dict, remote_dir: str, local_dir: Path, refetch: bool, result):
    """Bring each listed file up to the host's: a whole copy of a rewritten file, the new lines of
    an append-only one; a local copy that is no prefix of the host's is refused (or re-fetched)."""
    for name, e in info.items():
        local, remote, size = local_dir / name, f"{remote_dir}/{name}", e.size
        mine = have.get(name, 0)
        if not _append_only(name):
            same = (
                name in have and mine == size and e.sha256 and e.sha256 == prefix_hash(local, mine)
            )
            if same:
                result.files[name] = Pulled("unchanged")
            else:
                result.files[name] = Pulled("fetched", fetch_whole(conn, remote, local, size)[0])
            continue
        ours = prefix_hash(local, mine, whole=refetch)
        diverged = mine > size or (mine > 0 and e.prefix_sha256 != ours)
        if diverged:
            if not refetch:
                result.refused.append(name)
                result.files[name] = Pulled(
                    "refused: local copy is not a prefix of the host's file"
                )
                continue
            result.files[name] = Pulled("re-fetched", fetch_whole(conn, remote, local, size)[0])
        elif size > mine:
            local.parent.mkdir(parents=True, exist_ok=True)
            if mine == 0:
                local.touch()
            result.files[name] = Pulled(
                "appended" if mine else "fetched", _append_new(conn, remote, local, mine, size)
            )
        else:
            result.files[name] = Pulled("unchanged")
