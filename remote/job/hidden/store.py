"""The hidden-states stage's files for one dataset, laid out as speculators' offline trainer reads
them, each row counted exactly once through a kill -9 at any moment.

    data/hidden_states/<DS>/rows.jsonl                       row n: id, input_ids, loss_mask, facts
    data/hidden_states/<DS>/hidden_states/hs_<n>.safetensors  row n's hidden states

A row counts when its line is in rows.jsonl: the file is moved to hs_<n> first (a rename, then the
folder synced), the line appended after (one write, synced), so a line always names a file that is
whole. At open, the ledger is read back to its last whole line, each line's file must be there with
its size, and what is past that point (a torn line, a file moved whose line never came, a file
gone) is dropped and made again: hs_<n> beyond the ledger are files this stage moved there itself.

A row's file may also be freed: `pull --hidden-states --free` copied it off the host and its copy
has the file's sha256. Its line is in freed.jsonl (written and synced before the file goes), and
the row stays counted without its file. Freeing and the read-back at open hold the folder's lock,
so neither sees the other half done."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import time
import typing
from pathlib import Path

from ...common.answers import HiddenFreed
from ...common.codec import Codec, atomic_file, flocked, typed_lines, write_atomic
from ...common.jobspec import Paths
from ...common.protocol import CtlFree
from ...common.records import ROWS, SHA256_DIFFERS, RowLine, TokenRow, file_sha256
from ...common.wire import HostFault
from .hsfile import Checked

FREED = "freed.jsonl"  # rows whose file was taken off the host, checksum matched where it went


@dataclasses.dataclass
class Freed(Codec):
    """One line of freed.jsonl: row n's file, `bytes` long, taken off the host (with the sum its
    copy had; none on a line kept when the ledger was cut back)."""

    n: int
    bytes: int
    sha256: typing.Any = None  # for the record: never read back


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
        self.counted: list[tuple[str, int]] = []  # (row id, its tokens), in the ledger's order
        self.bytes = 0
        self.tokens = 0
        self.shape: tuple[int, int, str] | None = None  # layers, hidden size, dtype: every row's
        self.freed: dict[int, int] = {}  # n -> bytes of the rows whose file pull took off the host
        self._f = None

    @property
    def count(self) -> int:
        return len(self.done)

    def path(self, n: int) -> Path:
        return self.files / f"hs_{n}.safetensors"

    def open(self) -> HiddenStore:
        self.files.mkdir(parents=True, exist_ok=True)
        with locked(self.dir):
            self.freed = read_freed(self.dir)
            good, end = self._read_back()
            if end is not None:
                with open(self.ledger, "r+b") as f:
                    f.truncate(end)
                    os.fsync(f.fileno())
            for row in good:
                self._count(row)
            self._drop_files_past(self.count)
            if end is not None and any(n >= self.count for n in self.freed):
                # rows made again from here on are new files: an old row's freeing is not theirs
                self.freed = {n: b for n, b in self.freed.items() if n < self.count}
                lines = [Freed(n, b).line() for n, b in self.freed.items()]
                write_atomic(self.dir / FREED, b"".join(lines))
        for p in self.files.glob(".hs_*.tmp"):  # a copy cut off before its rename
            p.unlink()
        self._f = open(self.ledger, "ab")
        return self

    def _read_back(self) -> tuple[list[RowLine], int | None]:
        """The whole lines whose files are whole, and where to cut the ledger (None: nowhere)."""
        good, seen, offset = [], set(), 0
        try:
            f = open(self.ledger, "rb")
        except FileNotFoundError:
            return [], None
        with f:  # line by line: a ledger is mostly token ids, gigabytes of them in a long stage
            for raw in f:
                try:
                    row = RowLine.parse(raw)
                    why = self._unfit(row, len(good), seen)
                except ValueError as e:
                    why = str(e)
                if why:
                    self.log(f"{self.ledger}: row {len(good)} and after are made again: {why}")
                    return good, offset
                good.append(row)
                seen.add(row.id)
                offset += len(raw)
        return good, None

    def _unfit(self, row: RowLine, n: int, seen: set) -> str | None:
        if row.n != n or row.id in seen:
            return f"its line is out of order (row {row.n} {row.id} at {n})"
        try:
            have = self.path(n).stat().st_size
        except FileNotFoundError:
            if self.freed.get(n) == row.bytes:
                return None  # taken off the host whole: the row stays counted
            return f"{self.path(n).name} is gone"
        if have != row.bytes:
            return f"{self.path(n).name} has {have} bytes, {row.bytes} were checked"
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
        line = RowLine(n=n, id=row.id, record=row.record, turn=row.k, input_ids=row.input_ids,
                       loss_mask=row.loss_mask, seq_len=len(row.input_ids),
                       **dataclasses.asdict(facts), t=int(time.time()))  # fmt: skip
        self._f.write(line.line())
        self._f.flush()
        os.fsync(self._f.fileno())
        self._count(line)
        return n

    def _count(self, row: RowLine) -> None:
        self.done[row.id] = row.n
        self.counted.append((row.id, row.tokens))
        self.bytes += row.bytes
        self.tokens += row.tokens
        if self.shape is None:
            self.shape = (row.layers, row.hidden, row.dtype)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


@contextlib.contextmanager
def locked(folder: Path):
    """The dataset folder's lock: held while the ledger is read back and while files are freed."""
    folder.mkdir(parents=True, exist_ok=True)
    with flocked(folder / ".lock"):
        yield


def read_freed(folder: Path) -> dict[int, int]:
    """freed.jsonl's rows (n -> bytes); a line torn by a kill is a row not freed."""
    return {line.n: line.bytes for line in typed_lines(folder / FREED, Freed, whole=True)}


def free_rows(root: Path, dataset: str, sums: dict[int, str]) -> tuple[int, int, int, dict]:
    """Delete the row files whose copy elsewhere has these sha256 sums, each summed here first and
    named in freed.jsonl before it goes: (freed, bytes freed, freed before, {n: why not})."""
    folder = root / dataset
    files = folder / "hidden_states"
    done = size = before = 0
    refused = {}
    with locked(folder):
        freed = read_freed(folder)
        with open(folder / FREED, "ab") as log:
            for n, want in sorted(sums.items()):
                path = files / f"hs_{n}.safetensors"
                if n in freed:  # a free cut off between its line and the unlink: finish it
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    before += 1
                    continue
                got = file_sha256(path)
                if got is None or got != want:
                    refused[n] = "no such file" if got is None else SHA256_DIFFERS
                    continue
                nbytes = path.stat().st_size
                log.write(Freed(n, nbytes, got).line())
                log.flush()
                os.fsync(log.fileno())
                path.unlink()
                done, size = done + 1, size + nbytes
        if done:
            _fsync_dir(files)
    return done, size, before, refused


def free_command(paths: Paths, req: CtlFree) -> HiddenFreed:
    """`ctl free`: {dataset: {n: sha256}}; every row file whose sum matches is deleted."""
    try:
        asked = {
            str(ds): {int(n): str(h) for n, h in sums.items()} for ds, sums in req.rows.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise HostFault("usage", "ctl free: expected {dataset: {n: sha256}}") from None
    out = HiddenFreed()
    for ds, sums in asked.items():
        if not (paths.hidden_states / ds / ROWS).is_file():
            raise HostFault("usage", f"ctl free: the hidden-states stage has no dataset {ds}")
        done, size, before, refused = free_rows(paths.hidden_states, ds, sums)
        out.freed[ds], out.bytes, out.before = done, out.bytes + size, out.before + before
        if refused:
            out.refused[ds] = {str(n): why for n, why in refused.items()}
    return out


def _move(source: Path, dest: Path) -> None:
    """A rename where both are on one filesystem; else a copy written over `dest` atomically, then
    the source removed: `dest` is never seen in part."""
    try:
        os.replace(source, dest)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:  # another filesystem
            raise
    with open(source, "rb") as src, atomic_file(dest) as out:
        shutil.copyfileobj(src, out, 1 << 24)
    os.unlink(source)
