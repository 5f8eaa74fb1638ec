"""Where a command writes here (report/export --out, pull --to, export --pulled), checked before
anything is asked of a host: a path that cannot be written is one line and exit 2, never a traceback
after the work is done. The same for a folder only read (export --no-pull --pulled).

One rule for every such flag: the folder it goes in must exist already (a parent that is not there is
far likelier a typo than a wish for new folders, so none is made) and must take new entries. --out
names a file, so it may not be a folder; --to names a folder (made when missing), so not a file.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from ..errors import UsageError


def writable(path: str | os.PathLike, flag: str, *, folder: bool = False) -> Path:
    """`path`, given as `flag`, once it can be written; UsageError (exit 2) naming what is wrong.
    `folder`: the path is a folder to write in, else a file to write."""
    if not os.fspath(path):  # Path("") is the folder here: an empty value typed is no path
        raise UsageError(f"{flag}: needs a path, got ''")
    p = Path(path)
    parent = p.parent
    if not parent.is_dir():
        why = (
            f"{parent} is a file, not a folder"
            if parent.exists()
            else f"the folder {parent} does not exist (make it first)"
        )
        raise UsageError(f"{flag} {path}: {why}")
    if p.is_dir() != folder and p.exists():
        kind = "a file, not a folder" if folder else "a folder: name the file to write"
        raise UsageError(f"{flag} {path}: {p} is {kind}")
    where = p if p.is_dir() else parent
    try:  # what a write needs: a new entry there (mode bits alone say nothing to root or on /proc)
        os.rmdir(tempfile.mkdtemp(prefix=".deploytool-probe-", dir=where))
    except OSError as e:
        why = "" if e.errno == errno.ENOENT else f" ({e.strerror})"
        raise UsageError(f"{flag} {path}: cannot write in {where}{why}") from None
    return p


def folder_to_read(path: str | os.PathLike, flag: str, fix: str) -> Path:
    """`path`, given as `flag`, once it is a folder; UsageError (exit 2) naming it, with `fix` where
    it is not there at all."""
    if not os.fspath(path):
        raise UsageError(f"{flag}: needs a path, got ''")
    p = Path(path)
    if not p.is_dir():
        why = f"{p} is a file, not a folder" if p.exists() else f"no such folder: {fix}"
        raise UsageError(f"{flag} {path}: {why}")
    return p
