"""The hidden-states stage's files for one dataset, laid out as speculators' offline trainer reads
them, each row counted exactly once through a kill -9 at any moment.

    data/hidden_states/<DS>/rows.jsonl                       row n: id, input_ids, loss_mask, facts
    data/hidden_states/<DS>/hidden_states/hs_<n>.safetensors  row n's hidden states

A row counts when its line is in rows.jsonl: the file is moved to hs_<n> first (a rename, then the
folder synced), the line appended after (one write, synced), so a line always names a file that is
whole. At open, the ledger is read back to its last whole line, each line's file must be there with
its size, and what is past that point (a torn line, a file moved whose line never came, a file
gone) is dropped and made again: hs_<n> beyond the ledger are files this stage moved there itself."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from ...common.records import TokenRow
from .hsfile import Checked

ROWS = "rows.jsonl"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class HiddenStore:
    def __init__(self, root: Path, dataset: str, log=print):
        self.dir = root / dataset
        self.files = self.dir / "hidden_states"
        self.ledger = self.dir / ROWS
        self.log = log
        self.done: dict[str, int] = {}  # row id -> n
        self.bytes = 0
        self.tokens = 0
        self.shape: tuple[int, int, str] | None = None  # layers, hidden size, dtype: every row's
        self._f = None

    @property
    def count(self) -> int:
        return len(self.done)

    def path(self, n: int) -> Path:
        return self.files / f"hs_{n}.safetensors"

    def open(self) -> HiddenStore:
        self.files.mkdir(parents=True, exist_ok=True)
        good, end = self._read_back()
        if end is not None:
            with open(self.ledger, "r+b") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        for entry in good:
            self._count(entry["id"], entry["n"], entry)
        self._drop_files_past(self.count)
        for p in self.files.glob(".hs_*.tmp"):  # a copy cut off before its rename
            p.unlink()
        self._f = open(self.ledger, "ab")
        return self

    def _read_back(self) -> tuple[list[dict], int | None]:
        """The whole lines whose files are whole, and where to cut the ledger (None: nowhere)."""
        good, seen, offset = [], set(), 0
        try:
            data = self.ledger.read_bytes()
        except FileNotFoundError:
            return [], None
        for raw in data.splitlines(keepends=True):
            why = self._unfit(raw, len(good), seen)
            if why:
                self.log(f"{self.ledger}: row {len(good)} and after are made again: {why}")
                return good, offset
            good.append(json.loads(raw))
            seen.add(good[-1]["id"])
            offset += len(raw)
        return good, None

    def _unfit(self, raw: bytes, n: int, seen: set) -> str | None:
        if not raw.endswith(b"\n"):
            return "its line is torn (killed while it was written)"
        try:
            entry = json.loads(raw)
            size = int(entry["bytes"])
            int(entry["tokens"]), int(entry["layers"]), int(entry["hidden"]), str(entry["dtype"])
            if entry["n"] != n or entry["id"] in seen:
                return f"its line is out of order (row {entry['n']} {entry['id']} at {n})"
        except (ValueError, KeyError, TypeError):
            return "its line is not a row"
        try:
            have = self.path(n).stat().st_size
        except FileNotFoundError:
            return f"{self.path(n).name} is gone"
        if have != size:
            return f"{self.path(n).name} has {have} bytes, {size} were checked"
        return None

    def _drop_files_past(self, n: int) -> None:
        for p in self.files.glob("hs_*.safetensors"):
            try:
                i = int(p.name[3 : -len(".safetensors")])
            except ValueError:
                continue
            if i >= n:
                p.unlink()
                self.log(f"{p}: moved here by a stage killed before it counted: made again")

    def commit(self, row: TokenRow, source: Path, facts: Checked) -> int:
        """Move a checked file to the next hs_<n> and count it; its n."""
        if row.id in self.done:
            raise ValueError(f"row {row.id} is counted already")
        n = self.count
        dest = self.path(n)
        _move(source, dest)
        _fsync_dir(self.files)
        line = {"n": n, "id": row.id, "record": row.record, "turn": row.k}
        line.update(input_ids=row.input_ids, loss_mask=row.loss_mask, seq_len=len(row.input_ids))
        line.update(facts.to_json())
        self._f.write((json.dumps(line, separators=(",", ":")) + "\n").encode())
        self._f.flush()
        os.fsync(self._f.fileno())
        self._count(row.id, n, line)
        return n

    def _count(self, rid: str, n: int, entry: dict) -> None:
        self.done[rid] = n
        self.bytes += int(entry["bytes"])
        self.tokens += int(entry["tokens"])
        if self.shape is None:
            self.shape = (int(entry["layers"]), int(entry["hidden"]), str(entry["dtype"]))

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def _move(source: Path, dest: Path) -> None:
    """A rename where both are on one filesystem; else a copy beside `dest`, synced and renamed
    over it, then the source removed: `dest` is never seen in part."""
    try:
        os.replace(source, dest)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:  # another filesystem
            raise
    tmp = dest.with_name(f".{dest.name}.tmp")
    with open(source, "rb") as src, open(tmp, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 24)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, dest)
    os.unlink(source)
