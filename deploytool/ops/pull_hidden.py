"""pull --hidden-states: the hidden-states stage's rows and files; with --free, each file is deleted
on the host once the copy here has its sha256 (the host sums its own file before it deletes it, and
the row stays counted there).

    pulled/<host>/hidden_states/<DS>/rows.jsonl                         new whole lines only
    pulled/<host>/hidden_states/<DS>/hidden_states/hs_<n>.safetensors   each row's file, once

What the host said it freed is kept here in <DS>/.freed (one row number a line), so a later pull
neither asks for those files nor sums them again.
"""

from __future__ import annotations

import os
from pathlib import Path

from remote.common.protocol import CtlFiles, CtlFree
from remote.common.records import ROWS, SHA256_DIFFERS, file_sha256, row_lines

from ..connectors import Connector
from ..errors import RemoteError
from .control import call
from .pull import HiddenPulled, PullResult, _cut_torn_tail, fetch_whole, pull_host, sync

BATCH = 500  # files per `ctl free` (its sums go on stdin)


def pull_all(conn: Connector, dest: Path, refetch: bool, hidden: bool, free: bool) -> PullResult:
    """The outputs, then (`hidden`) the stage's rows and files."""
    result = pull_host(conn, dest, refetch=refetch)
    if hidden:
        local = Path(result.dest) / "hidden_states"
        result.hidden = pull_hidden(conn, local, refetch, free, result)
    return result


def pull_hidden(
    conn: Connector, local_root: Path, refetch: bool, free: bool, result: PullResult
) -> HiddenPulled:
    have = {}
    for p in local_root.glob(f"*/{ROWS}"):
        _cut_torn_tail(p)
        have[f"{p.parent.name}/{ROWS}"] = p.stat().st_size
    info = call(conn, CtlFiles(have=have, hidden=True, whole=refetch)).files
    remote_root = f"{conn.remote_dir.rstrip('/')}/data/hidden_states"
    ledgers = PullResult(result.host, str(local_root))
    sync(conn, info, have, remote_root, local_root, refetch, ledgers)
    for name, pulled in ledgers.files.items():
        result.files[f"hidden_states/{name}"] = pulled
    result.refused += [f"hidden_states/{name}" for name in ledgers.refused]
    out = HiddenPulled()
    for name in info:
        if name not in ledgers.refused:
            _dataset(conn, local_root / name.split("/")[0], remote_root, free, out)
    return out


def _dataset(conn: Connector, folder: Path, remote_root: str, free: bool, out: HiddenPulled):
    ds = folder.name
    freed = _read_freed(folder)
    sums: dict[int, str] = {}
    for row, _ in row_lines(folder / ROWS):
        n, size = row.n, row.bytes
        out.rows[ds] = n + 1
        path = folder / "hidden_states" / f"hs_{n}.safetensors"
        here = path.exists() and path.stat().st_size == size
        if not here and n in freed:
            out.missing.append(f"{ds} row {n}: freed on the host, and its copy here is gone")
            continue
        if not here:
            remote = f"{remote_root}/{ds}/hidden_states/{path.name}"
            try:
                sums[n] = fetch_whole(conn, remote, path, size, exact=True)[1]
            except RemoteError as e:
                out.missing.append(f"{ds} row {n}: {e}")
                continue
            out.fetched, out.bytes = out.fetched + 1, out.bytes + size
        elif free and n not in freed:
            sums[n] = file_sha256(path)
    if free:
        _free(conn, folder, sums, out)


def _free(conn: Connector, folder: Path, sums: dict[int, str], out: HiddenPulled) -> None:
    ds, todo = folder.name, sorted(sums)
    for i in range(0, len(todo), BATCH):
        batch = {str(n): sums[n] for n in todo[i : i + BATCH]}
        answer = call(conn, CtlFree(rows={ds: batch}))
        kept = answer.refused.get(ds, {})
        for n, why in kept.items():
            if why == SHA256_DIFFERS:  # the copy here is not the host's: the next pull makes it
                (folder / "hidden_states" / f"hs_{n}.safetensors").unlink(missing_ok=True)
                why += ": the next pull fetches it again"
            out.refused.append(f"{ds} row {n}: {why}")
        out.freed += answer.freed.get(ds, 0)
        out.freed_bytes += answer.bytes
        done = [n for n in batch if n not in kept]
        with open(folder / ".freed", "a", encoding="utf-8") as f:
            f.write("".join(f"{n}\n" for n in done))
            f.flush()
            os.fsync(f.fileno())


def _read_freed(folder: Path) -> set[int]:
    try:
        text = (folder / ".freed").read_text(encoding="utf-8")
    except FileNotFoundError:
        return set()
    return {int(x) for x in text.split("\n") if x.strip().isdigit()}
